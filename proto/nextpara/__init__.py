"""nextpara: next-paragraph retrieval.

The installed ``nextpara`` package maps onto the repository's top-level folders:
``nextpara.attention_core`` (attention_core/), ``nextpara.server`` (server/),
``nextpara.client`` (client/) and the generated gRPC stubs at ``nextpara.v1``
(proto/nextpara/v1/). This module stays import-light: it must never import torch,
faiss, numpy or sentence-transformers.
"""

__version__ = "0.1.0"
