"""Generated gRPC stubs for the ``nextpara.v1`` protocol package."""
