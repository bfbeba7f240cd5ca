"""Ingestion: corpus -> embeddings -> store, in acknowledged batches, with progress.

Documents are embedded and written in batches of about ``batch_paragraphs`` paragraphs;
each batch is one store transaction, so a kill at any moment loses at most the batch in
flight and never leaves a partial document. Documents whose content is already stored
unchanged are skipped before embedding. The index snapshot is written once at the end
(and loading replays anything after the last snapshot, see vector_table.py).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
from nextpara.errors import InvalidInputError, Reason
from nextpara.progress import progress_bar

from .corpus import CorpusReader, Document, validate_document
from .data_dir import DataDir
from .embedders import DEFAULT_EMBEDDER, Embedder, PrecomputedEmbedder, make_embedder, refuse_minilm_name, remote_model
from .embedding_cache import CachedEmbedder
from .store import open_store, refuse_another_embedder
from .tables import OPTION_KEYS, stored_options

log = logging.getLogger(__name__)


@dataclass
class BuildReport:
    data_dir: str
    documents_read: int = 0
    documents_skipped_bad: int = 0
    documents_added: int = 0
    documents_replaced: int = 0
    documents_unchanged: int = 0
    paragraphs_embedded: int = 0
    paragraphs_written: int = 0
    cached: bool = False  # whether the build embedded through the embedding cache (not with --no-cache)
    cache_hits: int = 0  # distinct texts whose vectors the embedding cache held (from earlier builds or serving)
    paragraphs_repeated: int = 0  # paragraphs whose text an earlier paragraph of this build has: embedded once
    paragraphs_cut: int = 0  # paragraphs written longer than the model reads: their vectors are of the beginning only
    first_cut: str = ""  # the first of them, as doc_id[i]
    model_reads_tokens: int = 0  # the model's limit, in word pieces (0: none to tell, or nothing embedded from text)
    documents_absent: int = 0  # stored documents this corpus does not hold (a removed file's, say): kept
    absent_doc_ids: list[str] = field(default_factory=list)  # the first of them
    documents_pruned: int = 0  # with prune: those documents, deleted
    embed_seconds: float = 0.0  # embedding alone (paragraphs_per_second's time): loading the model is model_load_seconds
    model_load_seconds: float = 0.0
    total_seconds: float = 0.0
    skipped_reasons: list[str] = field(default_factory=list)

    @property
    def paragraphs_per_second(self) -> float:
        return self.paragraphs_embedded / self.embed_seconds if self.embed_seconds else 0.0


def _batches(docs: Sequence[Document], batch_paragraphs: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    size = 0
    for doc in docs:
        batch.append(doc)
        size += len(doc.paragraphs)
        if size >= batch_paragraphs:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _embedder_for(spec: str, use_cache: bool, **kwargs) -> Embedder:
    """The build's embedder (for precomputed vectors, its dimension is theirs: _storable)."""
    if spec.startswith("precomputed"):
        return PrecomputedEmbedder(spec.partition(":")[2])
    embedder = make_embedder(spec, **kwargs)
    return CachedEmbedder(embedder) if use_cache else embedder


def _storable(docs: Sequence[Document], reader: CorpusReader, spec: str, dim: int | None,
              name: str = "") -> tuple[list[Document], int | None]:
    """The documents of ``docs`` this build can store, and their vectors' dimension: every document's vectors must be
    of ``dim`` (the embedder ``name``'s, or the store's), or where it is None (vectors brought to a new store) of the
    first document's; and a precomputed build needs vectors with every document. Any other document is malformed
    (CorpusReader.reject): FILE:LINE stops the build before the store is created or written, or --skip-bad skips it
    and counts it, as a line the reader refused."""
    precomputed = spec.startswith("precomputed")
    first, kept = None, []
    for d in docs:
        if d.vectors is None:
            if precomputed:
                reader.reject(InvalidInputError(f"{d.source}: document {d.doc_id!r} has no vectors, and embedder {spec} "
                                                "cannot embed text", reason=Reason.VECTORS_REQUIRED))
                continue
        elif dim is None:
            first, dim = d, len(d.vectors[0])
        elif len(d.vectors[0]) != dim:  # (one document's vectors are of one length: validate_document)
            whose = (f"the first document's ({first.source}) are of dimension {dim}" if first is not None else
                     f"this store's are of dimension {dim}" if precomputed else
                     f"embedder {name} makes vectors of dimension {dim} (vectors of another model: --embedder "
                     "precomputed:NAME)")
            reader.reject(InvalidInputError(f"{d.source}: document {d.doc_id!r} has vectors of dimension "
                                            f"{len(d.vectors[0])}; {whose}", reason=Reason.DIMENSION_MISMATCH,
                                            metadata={"expectedDim": dim, "actualDim": len(d.vectors[0])}))
            continue
        kept.append(d)
    return kept, dim


def _endpoint(spec: str, emb: Embedder, given: dict) -> dict | None:
    """What a store remembers of a remote embedder (the endpoint it was built against and the variable holding its
    key) for its queries (ParagraphStore.query_embedder); None for a local one. For ``precomputed:openai:MODEL`` (vectors
    brought, none embedded here) what the build was given."""
    if remote_model(spec, emb.name) is None:
        return None
    inner = getattr(emb, "inner", emb)  # under the embedding cache
    return {k: getattr(inner, k, None) or given.get(k) for k in OPTION_KEYS}


PROGRESS_CHUNK = 256  # paragraphs embedded per call when a build's bar follows the embedding


def embed_in_chunks(embedder: Embedder, texts: Sequence[str], progress=None) -> np.ndarray | None:
    """``texts`` embedded (None for none): in one call, or with ``progress`` in calls of PROGRESS_CHUNK texts,
    ``progress(n)`` after each, so that a bar moves as the model embeds."""
    step = PROGRESS_CHUNK if progress is not None else max(len(texts), 1)
    parts = []
    for s in range(0, len(texts), step):
        parts.append(embedder.embed(texts[s:s + step]))
        if progress is not None:
            progress(len(parts[-1]))
    return np.concatenate(parts) if parts else None


def _count_cut(report: BuildReport, model, todo: Sequence[Document], texts: list[str], distinct: list[str]) -> None:
    """Count the paragraphs of ``texts`` (those of ``todo`` given as text; ``distinct``, each text once) that
    ``model`` reads only the beginning of, and name the first, whether the model or the cache embeds them; nothing
    for a model that cannot tell."""
    if not texts or not hasattr(model, "over_length"):
        return
    over, report.model_reads_tokens = model.over_length(distinct)
    if not over:
        return
    cut = {distinct[i] for i in over}
    report.paragraphs_cut = sum(text in cut for text in texts)
    report.first_cut = next(f"{d.doc_id!r}[{i}]" for d in todo if d.vectors is None
                            for i, text in enumerate(d.paragraphs) if text in cut)


def vectors_for(embedder: Embedder, docs: Sequence[Document], progress=None) -> list[np.ndarray]:
    """One (n_paragraphs, dim) array per document: its supplied vectors, else embedded in one batched call (with
    ``progress``, in calls of PROGRESS_CHUNK paragraphs, ``progress(n)`` after each: a build's bar moves as it embeds).

    Documents are validated first, so bad input costs no model time; supplied vectors against the embedder's dimension
    (asked only where a document brings them: a model that does not declare it is loaded to tell it).
    """
    dim = embedder.dim if any(d.vectors is not None for d in docs) else None
    for d in docs:
        validate_document(d, where=d.source, dim=dim, embedder=embedder.name)
    todo = [d for d in docs if d.vectors is None]
    if todo and isinstance(embedder, PrecomputedEmbedder):
        d = todo[0]
        raise InvalidInputError(f"{d.source or 'document'} ({d.doc_id!r}) has no vectors, and this store's embedder "
                                f"{embedder.name!r} cannot embed text", reason=Reason.VECTORS_REQUIRED,
                                field=f"{d.request_path}.vectors" if d.request_path else None)
    flat = embed_in_chunks(embedder, [p for d in todo for p in d.paragraphs], progress)
    out, start = [], 0
    for d in docs:
        if d.vectors is not None:
            out.append(np.asarray(d.vectors, dtype=np.float32))
        else:
            out.append(flat[start:start + len(d.paragraphs)])
            start += len(d.paragraphs)
    return out


def build(corpus: str, data_dir: str | os.PathLike | DataDir | None = None, *, embedder: str | None = None, index: str | None = None,
          skip_bad: bool = False, batch_paragraphs: int = 1024, use_cache: bool = True, quiet: bool = False,
          embedder_options: dict | None = None, prune: bool = False) -> BuildReport:
    """Read ``corpus``, embed what changed, upsert it into the store, snapshot. Returns a report. ``embedder``: a spec
    (embedders.make_embedder); None, the store's own, else MiniLM. Stored documents the corpus does not hold are kept
    and counted (``documents_absent``), or with ``prune`` deleted, after the corpus's documents are stored; a corpus
    with malformed lines cannot prune (their documents' ids are unknown: they would go as removed)."""
    started = time.perf_counter()
    data_dir = DataDir.resolve(data_dir)
    report = BuildReport(data_dir=str(data_dir))
    reader = CorpusReader(corpus, skip_bad=skip_bad)
    docs = list(progress_bar(reader, desc="read corpus", unit="doc", quiet=quiet))
    stored = data_dir.read_store_meta()  # {} before the store exists
    embedder = embedder or stored.get("embedder_spec", stored.get("embedder")) or DEFAULT_EMBEDDER  # a rebuild: its own
    replace_blank = (bool(stored) and stored["embedder"] != make_embedder(embedder).name  # (a name: nothing loads)
                     and data_dir.never_written())
    if replace_blank:  # another embedder's store that no write reached (a first build stopped early): made anew,
        stored = {}  # nothing of it kept (not its endpoint either)
    given = {k: v for k, v in (embedder_options or {}).items() if v is not None}
    options = {**stored_options(stored), **given}  # a rebuild keeps the endpoint the store remembers unless told another
    emb = _embedder_for(embedder, use_cache, **options)
    refuse_another_embedder(data_dir, stored, emb.name, None)  # before a remote model is asked anything
    if isinstance(emb, PrecomputedEmbedder):  # vectors brought: of the store's dimension, else of the first document's
        docs, dim = _storable(docs, reader, embedder, int(stored["dim"]) if stored else None, emb.name)
        refuse_minilm_name(emb.name, dim)
        emb.dim = dim
    else:
        dim, inner = emb.dim, getattr(emb, "inner", emb)  # (under the embedding cache)
        if dim is None and stored:  # a remote model's store knows its dimension, and its answers are held to it
            dim = inner.dim = int(stored["dim"])
        elif dim is None and docs:  # a new one's model tells it by answering (not through the cache: the build
            dim = inner.embed([docs[0].paragraphs[0]]).shape[1]  # embeds that text again, counted once)
        refuse_another_embedder(data_dir, stored, emb.name, dim)
        docs, _ = _storable(docs, reader, embedder, dim, emb.name)
    report.documents_read, report.documents_skipped_bad = len(docs), reader.skipped
    report.skipped_reasons = reader.skipped_reasons
    if not docs:  # (before the store is created: a refused build leaves nothing behind)
        raise InvalidInputError(f"corpus {corpus!r} holds no documents"
                                + (f" this build can store ({reader.skipped} skipped as malformed)" if reader.skipped else ""))
    if prune and reader.skipped:  # (before anything is written)
        raise InvalidInputError(f"--prune with {reader.skipped} malformed document(s) skipped: their doc_ids are not "
                                "known, so their stored documents would be deleted as removed; fix them, or build "
                                "without --prune")
    store = open_store(data_dir, embedder_name=emb.name, dim=dim, embedder_spec=embedder, index=index,
                       embedder_options=_endpoint(embedder, emb, options), replace_blank=replace_blank)
    try:
        skip = store.unchanged(docs)
        report.documents_unchanged = len(skip)
        todo = [d for d in docs if d.doc_id not in skip]
        texts = [text for d in todo if d.vectors is None for text in d.paragraphs]  # what the embedder is asked for
        distinct = list(dict.fromkeys(texts))  # each embedded by the model or found in the cache, once
        model = getattr(emb, "inner", emb)  # (under the embedding cache)
        loaded = getattr(model, "load_seconds", 0.0)
        _count_cut(report, model, todo, texts, distinct)
        with progress_bar(total=sum(len(d.paragraphs) for d in todo), desc="embed+store", unit="para", quiet=quiet) as bar:
            for batch in _batches(todo, batch_paragraphs):
                t0 = time.perf_counter()
                vectors = vectors_for(emb, batch, bar.update)
                report.embed_seconds += time.perf_counter() - t0
                result = store.add_documents(batch, vectors)
                report.documents_added += result.added
                report.documents_replaced += result.replaced
                report.documents_unchanged += result.unchanged
                report.paragraphs_written += result.paragraphs
                bar.update(sum(len(d.paragraphs) for d in batch if d.vectors is not None))  # (embedded ones: as they were)
                # progress for logs when no bar is drawn (a bar and log lines on one terminal garble each other)
                log.log(logging.INFO if bar.disable else logging.DEBUG, "stored %d documents through %r (generation %d)",
                        len(batch), batch[-1].doc_id, result.generation)
        read = {d.doc_id for d in docs}
        absent = [doc_id for doc_id in store.doc_ids() if doc_id not in read]
        if prune and absent:
            store.delete_documents(absent)
            report.documents_pruned = len(absent)
            log.info("pruned %d stored documents the corpus does not hold: %s", len(absent), ", ".join(absent[:5]))
        elif absent:
            report.documents_absent, report.absent_doc_ids = len(absent), absent[:5]
        report.model_load_seconds = getattr(model, "load_seconds", 0.0) - loaded  # (if this loop loaded it)
        report.embed_seconds -= report.model_load_seconds
        with progress_bar(total=1, desc="snapshot index", unit="step", quiet=quiet) as bar:
            store.snapshot()
            bar.update(1)
    finally:
        store.close()
    if isinstance(emb, CachedEmbedder):
        report.cache_hits, report.paragraphs_repeated = len(distinct) - emb.misses, len(texts) - len(distinct)
        report.paragraphs_embedded, report.cached = emb.misses, True
        emb.close()
    elif not isinstance(emb, PrecomputedEmbedder):
        report.paragraphs_embedded = report.paragraphs_written
    report.total_seconds = time.perf_counter() - started
    return report
