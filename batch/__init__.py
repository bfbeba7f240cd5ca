"""Batch jobs: ``nextpara rerank-batch INPUT OUTPUT`` in this process, through a running service, or on Ray Data.

May import the model (attention_core), the store, the client and Ray; never the server.

Data flow: ``rows`` reads and checks input rows (JSON Lines through orjson, or Parquet through pyarrow in
``parquet_rows``, vector columns straight into NumPy) ->
an engine scores a chunk of rows (``scoring`` in this process, a running service through the
client, or Ray Data actors that run ``scoring`` themselves) -> ``output`` appends one JSON line
per row, in input order, and lets a rerun resume. ``job`` ties them together.

Only ``scoring`` and the in-process / Ray engines import numpy and torch (``parquet_rows`` numpy, for
Parquet input), so a client-only install can run a job on JSON Lines through a service.
"""
