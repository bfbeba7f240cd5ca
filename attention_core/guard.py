"""The guard of ``nextpara train`` (and, for the general model, of ``nextpara build``): a new model serves only if it is
better than what it would replace and than plain cosine.

Training does not always pay: on a small corpus a trained reranker can score below plain cosine to the
last paragraph (B1), or below the general model (general.py). So after training, the new model, the
model it would replace (the store's previous one, else the general model) and B1 are run on the
store's validation split, by the serving code path (evaluation.py with ``split="validation"``, L = 4,
contexts as their stored vectors and texts), with 95% bootstrap intervals. The best of the three on MRR@10
serves: the new model is saved only if it is above both the replaced model and B1; where B1 is at least as good
as the new model and above the one that serves, the store is served by plain cosine from then on
(general.cosine_model, saved as its checkpoint): a model serves only where it beats cosine, and a tie keeps what
serves. Below MIN_JUDGED validation queries nothing changes what serves (a difference there is a few queries' luck)
unless nothing did before. ``--force`` serves the new model whatever it scores. One plain line says what serves and
how it compares. The comparison is written to ``TRAIN_REPORT`` in the data dir, where ``nextpara info`` reads it.
After ``nextpara build`` there is no new model: :func:`judge_served` keeps the general model unless B1 is clearly
above it, and a build's plain cosine until the general model scores at least as well (build_guard.py).

Early stopping and the word-weight boost were chosen on the same validation split (a different
sample of 1,000 queries), which favours the new model slightly: the guard is a floor, not a measurement
(that is ``nextpara eval``, on the test split).
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nextpara.store.snapshot import replace_file_atomically

from .evaluation import Evaluation
from .metrics import summarize
from .model import NextParagraphModel
from .pipeline import RerankPipeline
from .served import COSINE_NAME, METRIC, TRAIN_REPORT, fmt

GUARD_QUERIES = 2000
GUARD_CONTEXT = 4  # L of the protocol's main table
MIN_JUDGED = 30  # fewer validation queries keep what serves: one query moves MRR@10 by over 1/30 there


@dataclass
class Verdict:
    serve_new: bool
    line: str  # the one plain line training (or the build) prints
    figures: dict[str, dict] = field(default_factory=dict)  # "new", "replaced" (if any), "B1": summarize() + name
    replaced: str = ""  # what the new model would replace: "the previous model <version>", "the general model <version>"
    #                     (served.describe_served matches it exactly), COSINE_NAME, or ""
    serve_cosine: bool = False  # plain cosine (B1) serves from now on: at least the new model's figure and above the
    #                             replaced model's


def validation_figures(store, seq, models: dict[str, NextParagraphModel], n_queries: int = GUARD_QUERIES) -> dict:
    """MRR@10, Recall@1/10 with intervals on validation queries, for B1 and each model's full pipeline."""
    ev = Evaluation(store, seq, None, None, n_queries=n_queries, context_length=GUARD_CONTEXT, seed=0,
                    split="validation")
    ranked, _ = ev.run("B1", ev.targets, ev.L, ev.L)
    out = {"B1": {**summarize(ev.ranks(ranked)), "queries": len(ev.targets)}}
    for name, model in models.items():
        ev.pipeline = RerankPipeline(model, store)
        ranked, _ = ev.run("full", ev.targets, ev.L, ev.L)
        out[name] = {**summarize(ev.ranks(ranked)), "queries": len(ev.targets)}
    return out


def basis(figures: dict[str, dict]) -> str:
    """What a verdict's figures rest on, for its line: the queries, the context length, the intervals."""
    n = figures["B1"].get("queries")
    return f" (validation split{f', {n} queries' if n else ''}, L = {GUARD_CONTEXT}; 95% bootstrap intervals)"


def with_basis(judge):
    """``judge`` (a function of the figures first, returning a Verdict) with its line saying what they rest on."""
    @functools.wraps(judge)
    def judged(figures: dict[str, dict], *args, **kwargs) -> Verdict:
        verdict = judge(figures, *args, **kwargs)
        verdict.line += basis(figures)
        return verdict
    return judged


@with_basis
def decide(figures: dict[str, dict], replaced: str, force: bool, same: bool = False) -> Verdict:
    """What serves after training, by validation MRR@10; a model serves only where it beats cosine, and a tie keeps
    what serves: the new model iff it is above both the replaced model (if any) and B1, or ``force``; else the
    replaced model iff it is at least B1's; else B1, plain cosine. ``replaced`` COSINE_NAME: plain cosine serves
    already, and the bar is the higher of its own figure and B1's (the same ranking, but for ties in the index).
    ``same``: the new model's version is the replaced model's, its weights and memory weight (a retraining of an
    unchanged store, same settings)."""
    new, b1, old = figures["new"], figures["B1"], figures.get("replaced")
    already_cosine = replaced == COSINE_NAME
    cosine = f"B1 (cosine to the last paragraph) {fmt(b1)}"
    if already_cosine:  # its own figure too where it differs from B1's
        against = cosine if old[METRIC] == b1[METRIC] else f"{COSINE_NAME} as served {fmt(old)} and {cosine}"
    else:
        against = f"{replaced} {fmt(old)} and {cosine}" if old else cosine
    redo = "`nextpara train --force` trains again and serves the result whatever it scores"
    n = b1.get("queries")
    if not force and n is not None and n < MIN_JUDGED and (old or already_cosine):
        line = (f"kept {replaced}: {n} validation queries are too few to tell models apart (the guard needs "
                f"{MIN_JUDGED}); the new model's validation MRR@10 {fmt(new)} against {against}; the new model was not "
                f"saved ({redo})")
        return Verdict(False, line, figures, replaced)
    rival = max((f for f in (old, b1) if f), key=lambda f: f[METRIC])  # the figure the new model has to beat
    if force or new[METRIC] > rival[METRIC]:
        why = "because of --force" if force else "" if old else "the only model for this store"
        line = f"serving the new model{f' ({why})' if why else ''}: validation MRR@10 {fmt(new)} against {against}"
        if force:
            ahead = [name for name, f in (("" if already_cosine else replaced, old), (COSINE_NAME, rival if already_cosine
                                                                                    else b1)) if name and f and new[METRIC] <= f[METRIC]]
            if ahead:
                line += f"; {' and '.join(ahead)} score{'s' if len(ahead) == 1 else ''} at least as well on this store"
        elif new[f"{METRIC}_ci"][0] <= rival[f"{METRIC}_ci"][1]:
            line += " (the intervals overlap: the gain may be noise)"
        return Verdict(True, line, figures, replaced)
    if already_cosine or (old and old[METRIC] >= b1[METRIC]):
        if same and not already_cosine:
            return Verdict(False, f"kept {replaced}: training made it again, weight for weight (the same store and "
                                  f"settings), so nothing changes: validation MRR@10 {fmt(old)} against {cosine}",
                           figures, replaced)
        line = (f"kept {replaced}: the new model's validation MRR@10 {fmt(new)} is not above it ({against}); the new "
                f"model was not saved ({redo})")
        return Verdict(False, line, figures, replaced)
    models = (f"above {replaced}'s {fmt(old)} and at least the new model's {fmt(new)}" if old else
              f"at least the new model's {fmt(new)}")
    line = f"serving {COSINE_NAME} from now on: its validation MRR@10 {fmt(b1)} is {models}; the new model was not " \
           f"saved ({redo})"
    return Verdict(False, line, figures, replaced, serve_cosine=True)


@with_basis
def judge_served(figures: dict[str, dict], name: str, cosine_serves: bool = False) -> Verdict:
    """No new model (build_guard.py, after ``nextpara build``): the general model (``figures["replaced"]``, called
    ``name``) against B1. The build runs this unasked, so plain cosine replaces the general model only where B1 is
    clearly above it, its MRR@10 interval clear of the model's (a difference inside the noise keeps the model, which
    was above cosine on every corpus measured); where a build's plain cosine serves already (``cosine_serves``), it
    stays until the general model scores at least as well as B1: B1 ahead inside the noise keeps whichever serves, so
    a store near the line does not change at every build (an exact tie goes to the general model). Below MIN_JUDGED
    validation queries, whichever serves stays, as after training."""
    served, b1 = figures["replaced"], figures["B1"]
    cosine = f"B1 (cosine to the last paragraph) {fmt(b1)}"
    n = b1.get("queries")
    if n is not None and n < MIN_JUDGED:  # as training's guard: a few queries' luck changes nothing that serves
        kept = COSINE_NAME if cosine_serves else name
        return Verdict(False, f"kept {kept}: {n} validation queries are too few to tell {name} from cosine (the "
                              f"guard needs {MIN_JUDGED}); {name}'s validation MRR@10 {fmt(served)} against {cosine}",
                       figures, name, serve_cosine=cosine_serves)
    if cosine_serves and served[METRIC] < b1[METRIC]:
        return Verdict(False, f"kept {COSINE_NAME}: its validation MRR@10 {fmt(b1)} is still above {name}'s "
                              f"{fmt(served)}", figures, name, serve_cosine=True)
    if not cosine_serves and b1[f"{METRIC}_ci"][0] > served[f"{METRIC}_ci"][1]:
        return Verdict(False, f"serving {COSINE_NAME} from now on: its validation MRR@10 {fmt(b1)} is clearly "
                              f"above {name}'s {fmt(served)} (`nextpara train` trains a model that serves if it "
                              "beats cosine)", figures, name, serve_cosine=True)
    if served[METRIC] >= b1[METRIC]:
        again = " again" if cosine_serves else ""
        return Verdict(False, f"{name} serves{again}: validation MRR@10 {fmt(served)}, at least {cosine}", figures,
                       name)
    return Verdict(False, f"{name} serves: validation MRR@10 {fmt(served)} against {cosine}: cosine scores higher "
                          "here, but inside the noise (the intervals overlap)", figures, name)


def write_report(data_dir: Path, verdict: Verdict, model_version: str, extra: dict | None = None) -> None:
    """TRAIN_REPORT in ``data_dir``, written atomically (a kill leaves the old report or the new one)."""
    report = {**asdict(verdict), "new_model_version": model_version,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    replace_file_atomically(Path(data_dir) / TRAIN_REPORT, (json.dumps(report, indent=2) + "\n").encode())
