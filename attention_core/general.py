"""Loading the model that serves a store: its own checkpoint, or the general model that ships with the package
(which one serves, read without loading it, is served.py).

The general model (``general.safetensors`` beside this file) is a reranker trained on a mixture of
genres (PEPs, 16 novels, the built-in Python docs; bench/quality/train_general.py makes it and its card
is in the README), for the MiniLM embedder. A store with no ``model.safetensors`` of its own is served
by it, so a store answers as soon as it is built.

Two files ship, from the same mixture and recipe but one model option (and the transition memory's weight, which
the one that serves fitted: transitions.py; the other was trained before the memory, and a store's training fits its
own). The general model that serves has
``list_norm`` (each similarity and word feature also as its z-score in its candidate list): on a genre its
mixture lacks it served better (the novels left out: validation MRR@10 +0.008, beyond its paired interval),
and trained on all three corpora it was at or above the model without it on each. ``nextpara train`` starts
from the other, ``general_start.safetensors`` (the same without ``list_norm``): a store's own model fine-tuned
from the ``list_norm`` one lost on the built-in docs (paired validation MRR@10 -0.013 and -0.003 with two seeds),
and a fine-tuned model must share its start's configuration. Measured in bench/quality/general_model.md
("Features read against their own list").

Where plain cosine to the last paragraph (B1) scored at least as well on a store's validation split as every
model ``nextpara train`` judged there, or above the general model after ``nextpara build`` (build_guard.py), the
store's checkpoint is :func:`cosine_model`, a model that ranks exactly as B1 does (guard.py decides; its metadata's
``kind`` is served.COSINE), so a store is never served by a model that its own validation queries found worse than
cosine (for the general model, which a build judges unasked: clearly worse, beyond the intervals).

Whatever the model needs from a corpus comes from the store it serves, never from the corpora it was
trained on: the word weights (IDF) of its word-overlap features are fitted on the store's texts when
it is loaded (about 1 s for 44K paragraphs), and its transition memory is the store's training documents'
(transitions.py), weighed as its training fitted (a general model trained before the memory: GENERAL_MEMORY_BOOST). Each file's weights are checked against the hash recorded
in served.py (``GENERAL_VERSION``, ``START_VERSION``) before it is used, and safetensors never unpickles
anything.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from nextpara.errors import FailedPreconditionError, Reason, StoreMismatchError
from nextpara.store.store import ParagraphStore

from . import lexical
from .checkpoint import load_checkpoint, save_checkpoint, versions, weights_version
from .model import NextParagraphModel
from .model_config import RerankerConfig, memory_weight
from .served import (
    CHECKPOINT,
    COSINE,
    COSINE_NAME,
    GENERAL_CHECKPOINT,
    SHIPPED,
    START_CHECKPOINT,
    fallback_line,
    fits,
    missing_shipped,
    read_checkpoint_meta,
)

log = logging.getLogger(__name__)


def cosine_model(embed_dim: int) -> NextParagraphModel:
    """A model that ranks exactly as B1 does: its query is the last context paragraph (``mix`` 1 and 0, no query
    head) and its score ``query_scale`` times a candidate's cosine to it, every other weight 0 (so the features,
    the word features it does not have and the scorer add exactly nothing). Stage 1's two vector sources are then the
    same search, B1's. The guard saves it as a store's checkpoint when B1 beats the models, so that everything that
    serves a checkpoint (the server, Reload, batch jobs, Ray actors, ``nextpara eval``, backups) serves cosine with no
    path of its own; its weights, all fixed, hash to the same version every time. It keeps the models' default
    max_context, as the context items a request keeps are also the paragraphs its answers exclude."""
    model = NextParagraphModel(RerankerConfig(embed_dim=embed_dim, d_model=4, n_heads=1, n_context_layers=0,
                                              n_scorer_layers=0, mlp_ratio=1, lexical=False,
                                              pool_density=False, candidate_tokens=False))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.mix.copy_(torch.tensor([1.0, 0.0]))
        model.query_scale.fill_(20.0)
    return model.eval()


def save_cosine(store: ParagraphStore, line: str, figures: dict, generation: int, **marks) -> None:
    """Make :func:`cosine_model` the store's checkpoint, with the guard's ``line`` and ``figures`` and the write
    ``generation`` it judged; ``marks``: who judged (a build's ``judged_by``, ``judged_against``; a training's
    ``corpus_fingerprint``)."""
    save_checkpoint(store.data_dir / CHECKPOINT, cosine_model(store.dim),
                    {"kind": COSINE, **marks, "line": line, "embedder": {"name": store.embedder_name, "dim": store.dim},
                     "index_generation": generation, "metrics": {"guard": figures}})


def load_general(path: Path = GENERAL_CHECKPOINT, expect_version: str | None = None) -> tuple[NextParagraphModel, dict]:
    """A packaged general model (default the one that serves), its weights checked against ``expect_version``
    (default: the hash served.py records for a packaged file, SHIPPED; for another file, or with "", against the file's own
    metadata only)."""
    if not path.exists():
        raise (missing_shipped(path, "the general model's fine-tuning start", "") if path == START_CHECKPOINT
               else missing_shipped(path))
    model, meta = load_checkpoint(path)
    expect = SHIPPED.get(path, "") if expect_version is None else expect_version
    found = versions(model)  # (its own version, and its weights' hash: what a checkpoint saved before 2026-12-05 carries)
    stored = meta.get("model_version")
    if stored not in found or (expect and expect != stored):
        raise FailedPreconditionError(f"{path}: its weights hash to {found[1]} (version {found[0]}), expected "
                                      f"{expect or stored}: "
                                      "the file is damaged or not the one this version of nextpara ships",
                                      reason=Reason.MODEL_UNREADABLE)
    return model, {**meta, "source": "general"}


WORD_WEIGHTS_FROM_STORE = "store"  # meta["word_weights"] of a checkpoint that carries none (a mixture's)


def fit_store_lexicon(model: NextParagraphModel, store: ParagraphStore) -> None:
    """Set the model's word weights from the store's own texts (a general model carries none)."""
    if not model.cfg.lexical:
        return
    ids = store.paragraph_table()[0]
    texts = [p.text for p in store.get_paragraphs([int(i) for i in ids])] if len(ids) else []
    with torch.no_grad():
        model.lexicon_idf.copy_(torch.from_numpy(lexical.Lexicon.fit(texts).idf))


def general_for_store(store: ParagraphStore) -> tuple[NextParagraphModel, dict]:
    """The general model ready to serve ``store`` (IDF from its texts, the transition memory's weight its training
    fitted, else model_config.GENERAL_MEMORY_BOOST); StoreMismatchError if the store's embedder is not the one the general model was trained for."""
    model, meta = load_general()
    mismatch = fits(meta, store)
    if mismatch:
        raise StoreMismatchError(f"no trained model in {store.data_dir}, and {mismatch}: run `nextpara train "
                                 f"--data-dir {store.data_dir}`", reason=Reason.NO_MODEL)
    fit_store_lexicon(model, store)
    model.cfg.memory_boost = memory_weight(meta, general=True)
    return model, meta


def checkpoint_for_store(path, store: ParagraphStore) -> tuple[NextParagraphModel, dict]:
    """A checkpoint file for ``store``: the word weights of one trained on a mixture (``word_weights`` "store",
    as bench/quality/train_general.py writes them) are fitted on the store's texts, and it weighs the transition
    memory as its training fitted it, else as a general model trained before the memory does (model_config.memory_weight)."""
    model, meta = load_checkpoint(path, store.embedder_name, store.dim)
    if meta.get("word_weights") == WORD_WEIGHTS_FROM_STORE:
        fit_store_lexicon(model, store)
        model.cfg.memory_boost = memory_weight(meta, general=True)  # (a leave-one-out one, say)
    return model, meta


def served_model(store: ParagraphStore) -> tuple[NextParagraphModel, dict]:
    """The store's own model if it has one (a trained one, or cosine_model()), else the general model, else (a store
    of another embedder's vectors) cosine_model(); ``meta["source"]`` says which: "trained", COSINE or "general"."""
    own = store.data_dir / CHECKPOINT
    if own.exists():
        model, meta = load_checkpoint(own, store.embedder_name, store.dim)
        if meta.get("kind") == COSINE:
            log.info("%s serves %s: %s", COSINE_NAME, store.data_dir, meta.get("line", "the guard chose it"))
        return model, {**meta, "source": meta.get("kind", "trained")}
    try:
        model, meta = general_for_store(store)
    except StoreMismatchError:  # vectors of another embedder (1536-d ones callers bring, say): plain cosine serves
        model = cosine_model(store.dim)
        meta = {"kind": COSINE, "source": COSINE, "model_version": cosine_version(store.dim),
                "line": fallback_line(fits(read_checkpoint_meta(GENERAL_CHECKPOINT), store))}
        log.info("%s serves %s: %s", COSINE_NAME, store.data_dir, meta["line"])
        return model, meta
    log.info("no trained model in %s: serving the general model %s", store.data_dir, meta["model_version"])
    return model, meta


def cosine_version(dim: int) -> str:
    """The model_version of cosine_model(dim) (its weights are fixed: the same every time)."""
    return weights_version(cosine_model(dim).state_dict())
