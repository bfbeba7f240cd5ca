"""The Python client library for the nextpara service.

Imports only grpcio, protobuf and the generated stubs: never torch, faiss, numpy or
sentence-transformers, so applications that only call the service stay light.
"""
