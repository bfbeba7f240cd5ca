"""The default store a newcomer gets: the built-in corpus, built and trained on first use.

``nextpara serve`` with no ``--data-dir`` calls :func:`ensure_default_store` before it starts the
server, so the transport layer never builds or trains anything.
"""

from __future__ import annotations

import logging

from nextpara.store.data_dir import DataDir
from nextpara.store.ingest import build

from .checkpoint import CHECKPOINT
from .training import train

log = logging.getLogger(__name__)


def ensure_default_store(data_dir: DataDir, quiet: bool) -> None:
    """If ``data_dir`` is the default location ($NEXTPARA_DATA_DIR included), build (or complete) the built-in
    corpus there and train a model if there is none; any other data dir is the user's to build."""
    if data_dir != DataDir.default():
        return
    # always (re)build: unchanged documents cost nothing, and a build killed halfway is completed
    log.info("%s the built-in corpus in %s", "checking" if data_dir.has_store else "building", data_dir)
    report = build("builtin", data_dir, quiet=quiet)
    log.info("%d paragraphs written, %d documents unchanged, in %.0fs", report.paragraphs_written,
             report.documents_unchanged, report.total_seconds)
    if not (data_dir / CHECKPOINT).exists():
        log.info("no model in %s yet: training one", data_dir)
        meta = train(data_dir, quiet=quiet)
        log.info("trained model %s: validation MRR@10 %.3f", meta["model_version"], meta["metrics"]["validation"]["mrr@10"])
