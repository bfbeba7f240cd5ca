"""The default store a newcomer gets: the built-in corpus, built on first use and served by the general model.

``nextpara serve`` with no ``--data-dir`` calls :func:`ensure_default_store` before it starts the
server, so the transport layer never builds anything. No training on the way to SERVING: the general
model (general.py) serves a store that has no model of its own; ``nextpara train`` (no flags: the
default data dir) trains one for the built-in corpus, and keeps it only if it beats the general model and plain cosine.
"""

from __future__ import annotations

import logging

from nextpara.store.data_dir import DataDir
from nextpara.store.ingest import build

from .checkpoint import CHECKPOINT

log = logging.getLogger(__name__)


def ensure_default_store(data_dir: DataDir, quiet: bool) -> None:
    """If ``data_dir`` is the default location ($NEXTPARA_DATA_DIR included), build (or complete) the built-in
    corpus there; any other data dir is the user's to build."""
    if data_dir != DataDir.default():
        return
    # always (re)build: unchanged documents cost nothing, and a build killed halfway is completed
    log.info("%s the built-in corpus in %s", "checking" if data_dir.has_store else "building", data_dir)
    report = build("builtin", data_dir, quiet=quiet)
    log.info("%d paragraphs written (%d embedded by the model, %d from the embedding cache), %d documents unchanged, "
             "in %.0fs", report.paragraphs_written, report.paragraphs_embedded, report.cache_hits,
             report.documents_unchanged, report.total_seconds)
    if not (data_dir / CHECKPOINT).exists():
        log.info("no model of its own in %s: the general model serves it (`nextpara train` trains one)", data_dir)
