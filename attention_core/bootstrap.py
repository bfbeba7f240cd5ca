"""The default store a newcomer gets: the built-in corpus, built on first use and served by the general model.

``nextpara serve`` with no ``--data-dir`` calls :func:`ensure_default_store` before it starts the
server, so the transport layer never builds anything. It builds only a default store that is empty or holds
built-in documents alone; one that holds a user's documents is left as it is. No training on the way to SERVING: the general
model (general.py) serves a store that has no model of its own; ``nextpara train`` (no flags: the
default data dir) trains one for the built-in corpus, and keeps it only if it beats the general model and plain cosine.
"""

from __future__ import annotations

import logging

from nextpara.errors import FailedPreconditionError
from nextpara.store.data_dir import DataDir
from nextpara.store.embedders import DEFAULT_EMBEDDER
from nextpara.store.ingest import build

from .checkpoint import CHECKPOINT

log = logging.getLogger(__name__)


def ensure_default_store(data_dir: DataDir, quiet: bool, read_only: bool = False) -> None:
    """If ``data_dir`` is the default location ($NEXTPARA_DATA_DIR included) and holds nothing but built-in documents
    (or nothing at all), build the built-in corpus there, or complete it: a first run stopped halfway is finished by
    the next, and unchanged documents cost nothing. A default store holding any document of the user's own is theirs,
    served as it is; a read-only server (a replica) never writes. Any other data dir is the user's to build."""
    if data_dir != DataDir.default() or read_only:
        return
    foreign = first_foreign_document(data_dir) if data_dir.has_store else None
    if foreign is not None:
        log.info("the default store %s holds documents of its own (%s among them): served as it is, without the "
                 "built-in corpus", data_dir, foreign)
        return
    spec = ((data_dir.manifest() or {}).get("embedder") or {}).get("spec", DEFAULT_EMBEDDER)  # the store's own
    if spec.startswith("precomputed"):
        log.info("the default store %s holds vectors its callers bring (%s): the built-in corpus, which has none, is "
                 "not built into it", data_dir, spec)
        return
    log.info("%s the built-in corpus in %s", "checking" if data_dir.has_store else "building", data_dir)
    report = build("builtin", data_dir, embedder=spec, quiet=quiet)
    log.info("%d paragraphs written (%d embedded by the model, %d from the embedding cache), %d documents unchanged, "
             "in %.0fs", report.paragraphs_written, report.paragraphs_embedded, report.cache_hits,
             report.documents_unchanged, report.total_seconds)
    if not (data_dir / CHECKPOINT).exists():
        log.info("no model of its own in %s: the general model serves it (`nextpara train` trains one)", data_dir)


def first_foreign_document(data_dir: DataDir) -> str | None:
    """The first stored doc_id (in doc_id order) that is not one of the built-in corpus's, None if there is none."""
    from nextpara.store.builtin_corpus import builtin_documents
    from nextpara.store.store import open_store

    try:  # for writing, as the build and the server after it open it: an older store gets its upgrades first
        store = open_store(data_dir)
    except FailedPreconditionError:  # a first build stopped before its first commit: nothing stored (the build
        return None  # that follows opens it again, and says so if something else is wrong)
    builtin = {d.doc_id for d in builtin_documents()}
    with store:
        after = ""
        while page := store.list_documents(after, limit=1000):
            foreign = next((row.doc_id for row in page if row.doc_id not in builtin), None)
            if foreign is not None:
                return foreign
            after = page[-1].doc_id
    return None
