"""The default store a newcomer gets: the built-in corpus, built on first use and served by the general model.

``nextpara serve`` with no ``--data-dir`` calls :func:`ensure_default_store` before it starts the
server, so the transport layer never builds anything. It builds only a default store that is empty or holds
built-in documents alone; one that holds any other document is left as it is. No training on the way to SERVING: the general
model (general.py) serves a store that has no model of its own; ``nextpara train`` (no flags: the
default data dir) trains one for the built-in corpus, and keeps it only if it beats the general model and plain cosine.
"""

from __future__ import annotations

import logging

from nextpara.store.builtin_corpus import BUILTIN_PREFIXES
from nextpara.store.data_dir import DataDir
from nextpara.store.embedders import DEFAULT_EMBEDDER
from nextpara.store.ingest import build

from .served import CHECKPOINT

log = logging.getLogger(__name__)


def ensure_default_store(data_dir: DataDir, quiet: bool, read_only: bool = False) -> None:
    """Build (or complete) the built-in corpus in ``data_dir`` where :func:`builtin_embedder` says to."""
    spec = builtin_embedder(data_dir, read_only)
    if spec is None:
        return
    log.info("%s the built-in corpus in %s", "checking" if data_dir.has_store else "building", data_dir)
    report = build("builtin", data_dir, embedder=spec, quiet=quiet)
    log.info("%d paragraphs written (%d embedded by the model, %d from the embedding cache, %d repeating an earlier "
             "one's text), %d documents unchanged, in %.0fs", report.paragraphs_written, report.paragraphs_embedded,
             report.cache_hits, report.paragraphs_repeated, report.documents_unchanged, report.total_seconds)
    if report.paragraphs_cut:
        log.info("%d of them longer than the model reads (%d word pieces): embedded by their beginning",
                 report.paragraphs_cut, report.model_reads_tokens)
    if not (data_dir / CHECKPOINT).exists():
        log.info("no model of its own in %s: the general model serves it (`nextpara train` trains one)", data_dir)


def builtin_embedder(data_dir: DataDir, read_only: bool = False) -> str | None:
    """The embedder to build the built-in corpus into ``data_dir`` with (the store's own, else the default), or None
    to build nothing. It builds where ``data_dir`` is the default location ($NEXTPARA_DATA_DIR included) and holds
    nothing but built-in documents (doc_ids ``topic:...`` and ``module:...``) or nothing at all: a first run stopped
    halfway is completed by the next, and unchanged documents are not embedded again. A default store holding any
    other document is the user's, served as it is; a read-only server (a replica) never writes; any other data dir is
    the user's to build; a store of vectors that callers bring cannot embed the corpus's texts."""
    if data_dir != DataDir.default() or read_only:
        return None
    other = data_dir.first_doc_id_outside(BUILTIN_PREFIXES)  # a read-only query: no lock, no vectors loaded
    if other is not None:
        log.info("the default store %s holds documents not from the built-in corpus (%s among them): served as it is, "
                 "without building that corpus into it", data_dir, other)
        return None
    spec = data_dir.read_store_meta().get("embedder_spec", DEFAULT_EMBEDDER)  # the store's own, if it has one
    if spec.startswith("precomputed"):
        log.info("the default store %s holds vectors its callers bring (%s): the built-in corpus, which has none, is "
                 "not built into it", data_dir, spec)
        return None
    return spec
