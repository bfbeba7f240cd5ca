"""nextpara, the package root: the errors every room shares, progress bars, the ``nextpara`` command, the stubs at ``nextpara.v1``.

May import nothing of the rooms below it (only ``__main__`` does, to register each room's commands). The installed
package maps onto the repository's top-level folders: ``nextpara.store`` (store/), ``nextpara.attention_core``
(attention_core/), ``nextpara.server`` (server/), ``nextpara.batch`` (batch/), ``nextpara.client`` (client/) and the
generated gRPC stubs at ``nextpara.v1`` (proto/nextpara/v1/). This module stays import-light: it never imports
torch, faiss, numpy or sentence-transformers.
"""

__version__ = "0.1.0"
