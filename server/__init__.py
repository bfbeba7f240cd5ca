"""The gRPC server (see the service issue): thin servicers over nextpara.attention_core."""
