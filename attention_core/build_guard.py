"""The guard after ``nextpara build``: the general model against plain cosine on the store it is to serve.

A store with no model of its own is served by the general model (general.py), which was trained on other
corpora than the user's. So that it too serves only where cosine is not clearly better, ``nextpara build`` ends with
the guard's comparison (guard.py) of the general model and B1 (cosine to the last paragraph) on the store's
validation split, from the stored vectors:

- the general model keeps serving unless B1's MRR@10 interval is clear above its own (guard.judge_served: this runs
  unasked on every new store, so a difference inside the noise keeps the model that was ahead of cosine on every
  corpus measured), and ``nextpara info`` shows the two figures (``train_report.json``, as a training leaves it);
- otherwise plain cosine serves: general.cosine_model is saved as the store's ``model.safetensors``, marked as the
  build's (``judged_by``, ``judged_against``: the general model's version), until a ``nextpara train`` makes a model
  that beats it. A later build judges again, and removes that checkpoint where the general model scores at least
  as well as B1 (B1 ahead inside the noise keeps whichever serves, so a store near the line does not change at every
  build; an exact tie goes to the general model).

A build judges again unless the last report (a build's or a training's) judged what serves now, on the store as it is
now (its write generation): so a store changed by ``nextpara add``, by a build with ``--no-guard`` or by one
interrupted before its guard, and a store whose general model came with a new nextpara version, is judged by the next
build even if that build writes nothing. A store with a model of its own (trained, or cosine chosen by ``nextpara
train``) is left alone: training judged it. A store without validation queries, or of an embedder the general model
does not fit, is not judged, and the line says why (one with fewer than guard.MIN_JUDGED validation queries is
run, and keeps what serves); so is a store whose checkpoint cannot be read or written (the
build's documents are committed by then). The guard holds the store's model lock (DataDir.model_lock) from reading
what serves to writing its verdict, as ``nextpara train``'s guard does: one waits for the other and then judges
what that one left. ``nextpara build --no-guard`` skips the step; the default store that ``nextpara serve`` builds on first use
(bootstrap.py) skips it too, so that the first run reaches SERVING sooner: the general model was trained on that
corpus and is far above B1 there (bench/results/build_guard.md).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from nextpara.errors import NextparaError
from nextpara.store.snapshot import fsync_dir
from nextpara.store.store import open_store
from safetensors import SafetensorError

from .general import general_for_store, load_general, save_cosine
from .guard import judge_served, validation_figures, write_report
from .sequences import ParagraphSequences
from .served import (
    CHECKPOINT,
    COSINE,
    COSINE_NAME,
    GENERAL_CHECKPOINT,
    GENERAL_VERSION,
    fits,
    general_name,
    read_checkpoint_meta,
    read_report,
)

log = logging.getLogger(__name__)

BUILD = "nextpara build"  # the checkpoint's ``judged_by`` when this module chose plain cosine


@dataclass
class BuildGuard:
    judged: bool  # the general model and B1 were run on the validation split
    line: str  # one plain line: what serves the store now, and why
    cosine: bool = False  # plain cosine serves the store now (chosen by this build or an earlier one)


def guard_general(data_dir: str | os.PathLike, again: bool = False) -> BuildGuard:
    """Judge the general model against B1 on the store in ``data_dir`` unless a guard has judged what serves it now
    (``again``: even then, as bench.quality.build_guard does to measure it)."""
    try:
        with open_store(data_dir, readonly=True) as store, store.data_dir.model_lock("the guard after the build"):
            return _guard(store, again)
    except (NextparaError, OSError, SafetensorError, sqlite3.Error, ValueError) as e:  # a damaged checkpoint, a full
        return BuildGuard(False, f"the general model was not judged: {e}", cosine_serves(Path(data_dir)))  # disk


def _guard(store, again: bool) -> BuildGuard:
    data_dir, generation = store.data_dir, store.index_generation  # the store as this open sees it, all through
    own = data_dir / CHECKPOINT
    mine = read_checkpoint_meta(own) if own.exists() else None  # the store's own checkpoint's metadata
    if mine is not None and mine.get("judged_by") != BUILD:
        what = f"{COSINE_NAME}, chosen by `nextpara train`" if mine.get("kind") == COSINE else \
            f"its own model {mine['model_version']}"
        return BuildGuard(False, f"{data_dir} is served by {what}: not judged again", mine.get("kind") == COSINE)
    report = read_report(data_dir)
    if not again and describes_what_serves(report, generation, mine):
        return BuildGuard(False, f"unchanged since the guard's last verdict, not judged again: {report['line']}",
                          mine is not None)
    if not GENERAL_CHECKPOINT.exists():
        load_general()  # raises: the general model is missing from this installation, and what to do
    mismatch = fits(read_checkpoint_meta(GENERAL_CHECKPOINT), store)
    if mismatch:
        return BuildGuard(False, f"{COSINE_NAME} serves {data_dir}, not judged: {mismatch} (`nextpara train` trains a "
                                 "model that serves if it beats cosine)", True)
    seq = ParagraphSequences(store)
    if not seq.queries("validation", 1, limit=1):
        serves = COSINE_NAME if mine is not None else general_name(GENERAL_VERSION)
        return BuildGuard(False, f"{serves} serves {data_dir}, not judged: the store holds no validation queries (the "
                                 "split rule puts 10% of documents there; a query needs a document of two paragraphs)",
                          mine is not None)
    model, meta = general_for_store(store)
    name = general_name(meta["model_version"])
    log.info("guard: %s and B1 on the validation split", name)
    figures = validation_figures(store, seq, {"replaced": model})
    verdict = judge_served(figures, name, cosine_serves=mine is not None)
    if verdict.serve_cosine:
        save_cosine(store, verdict.line, figures, generation, judged_by=BUILD, judged_against=meta["model_version"])
    elif mine is not None:  # cosine chosen by an earlier build, and the general model has caught up
        own.unlink()
        fsync_dir(data_dir)
    write_report(data_dir, verdict, "", {"judged_by": BUILD, "index_generation": generation})
    return BuildGuard(True, verdict.line, verdict.serve_cosine)


def cosine_serves(data_dir: Path) -> bool:
    """Whether the store's own checkpoint is plain cosine, as far as it can be read."""
    try:
        return read_checkpoint_meta(data_dir / CHECKPOINT).get("kind") == COSINE
    except (NextparaError, OSError, ValueError):
        return False


def describes_what_serves(report: dict | None, generation: int, mine: dict | None) -> bool:
    """Whether the last guard's report (a build's or a training's) judged what serves the store now, with ``mine`` the
    metadata of the store's checkpoint that a build wrote (None: the general model serves), on the store as it is at
    ``generation``: not a report of an earlier generation, or of another general model, or of a new model that serves
    no more, or one at odds with the checkpoint (a kill between the two writes)."""
    if not report or report.get("serve_new") or report.get("index_generation") != generation:
        return False
    if report.get("replaced") not in (general_name(GENERAL_VERSION), COSINE_NAME):
        return False
    if mine is None:
        return report["replaced"] != COSINE_NAME and not report.get("serve_cosine")
    return mine.get("judged_against") == GENERAL_VERSION and bool(report.get("serve_cosine")
                                                                  or report["replaced"] == COSINE_NAME)
