"""The gRPC transport only: the servicer, conversion, batching, auth, metrics and main (``nextpara serve``).
It may import attention_core, store, the package root (errors, version) and the generated stubs; never batch or client."""
