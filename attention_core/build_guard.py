"""The guard after ``nextpara build``: the general model against plain cosine on the store it is to serve.

A store with no model of its own is served by the general model (general.py), which was trained on other
corpora than the user's. So that it too serves only where it beats cosine, ``nextpara build`` ends, when it
changed such a store, with the guard's comparison (guard.py) of the general model and B1 (cosine to the last
paragraph) on the store's validation split:

- the general model keeps serving if its validation MRR@10 is at least B1's (a tie keeps what serves), and
  ``nextpara info`` shows the two figures (``train_report.json``, as after a training that kept it);
- otherwise plain cosine serves: general.cosine_model is saved as the store's ``model.safetensors``, marked as the
  build's (``judged_by``), until a ``nextpara train`` makes a model that beats it. A later build that changes the
  store judges again, and removes that checkpoint where the general model has caught up.

A store with a model of its own (trained, or cosine chosen by ``nextpara train``) is left alone: training judged it.
A store without validation documents, or of an embedder the general model does not fit, is not judged, and the
line says why. ``nextpara build --no-guard`` skips the step; the default store that ``nextpara serve`` builds on first
use (bootstrap.py) skips it too, so that the first run reaches SERVING sooner: the general model was trained on that
corpus and is far above B1 there (bench/results/general_model.md).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from nextpara.errors import FailedPreconditionError, StoreMismatchError
from nextpara.store.snapshot import fsync_dir
from nextpara.store.store import open_store

from .checkpoint import CHECKPOINT, read_checkpoint_meta, save_checkpoint
from .general import COSINE, COSINE_NAME, cosine_model, general_for_store, general_name
from .guard import judge_served, read_report, validation_figures, write_report
from .sequences import ParagraphSequences

log = logging.getLogger(__name__)

BUILD = "nextpara build"  # the checkpoint's ``judged_by`` when this module chose plain cosine


@dataclass
class BuildGuard:
    judged: bool  # the general model and B1 were run on the validation split
    line: str  # one plain line: what serves the store now, and why
    cosine: bool = False  # plain cosine serves the store now (chosen by this build or an earlier one)


def guard_general(data_dir: str | os.PathLike, changed: bool = True) -> BuildGuard:
    """Judge the general model against B1 on the store in ``data_dir`` if nothing else has judged what serves it;
    ``changed`` False (the build wrote nothing): only if no guard's report describes what serves it now."""
    with open_store(data_dir, readonly=True) as store:
        data_dir = store.data_dir
        own = data_dir / CHECKPOINT
        meta = read_checkpoint_meta(own) if own.exists() else {}
        if own.exists() and meta.get("judged_by") != BUILD:
            what = f"{COSINE_NAME}, chosen by `nextpara train`" if meta.get("kind") == COSINE else \
                f"its own model {meta['model_version']}"
            return BuildGuard(False, f"{data_dir} is served by {what}: not judged again", meta.get("kind") == COSINE)
        report = read_report(data_dir)
        if not changed and describes_what_serves(report, own.exists()):
            return BuildGuard(False, f"{data_dir} is unchanged: not judged again ({report['line']})", own.exists())
        try:
            model, meta = general_for_store(store)
        except (FailedPreconditionError, StoreMismatchError) as e:
            return BuildGuard(False, f"the general model was not judged: {e}")
        name = general_name(meta["model_version"])
        seq = ParagraphSequences(store)
        if not seq.queries("validation", 1, limit=1):
            serves = COSINE_NAME if own.exists() else name
            return BuildGuard(False, f"{serves} serves {data_dir}, not judged: the store holds no validation documents "
                                     "(the split rule puts 10% of documents there)", own.exists())
        log.info("guard: %s and B1 on the validation split", name)
        figures = validation_figures(store, seq, {"replaced": model})
        verdict = judge_served(figures, name)
        if verdict.serve_cosine:
            save_checkpoint(own, cosine_model(store.dim),
                            {"kind": COSINE, "judged_by": BUILD, "line": verdict.line,
                             "embedder": {"name": store.embedder_name, "dim": store.dim},
                             "index_generation": store.generation, "metrics": {"guard": figures}})
        elif own.exists():  # cosine chosen by an earlier build, and the general model has caught up
            own.unlink()
            fsync_dir(data_dir)
        write_report(data_dir, verdict, "", {"judged_by": BUILD})
        return BuildGuard(True, verdict.line, verdict.serve_cosine)


def describes_what_serves(report: dict | None, cosine_serves: bool) -> bool:
    """Whether the last guard's report (training's or a build's) judged what serves the store now: not one whose new
    model was served and has gone since, nor one at odds with the checkpoint (a kill between the two writes)."""
    if not report or report.get("serve_new"):
        return False
    return bool(report.get("serve_cosine") or report.get("replaced") == COSINE_NAME) == cosine_serves
