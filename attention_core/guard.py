"""The guard of ``nextpara train``: a new model serves only if it is better than what it would replace.

Training does not always pay: on a small corpus a trained reranker can score below plain cosine to the
last paragraph (B1), or below the general model (general.py). So after training, the new model, the
model it would replace (the store's previous one, else the general model) and B1 are run on the
store's validation split, by the serving code path (evaluation.py with ``split="validation"``, L = 4,
contexts as their stored vectors and texts), with 95% bootstrap intervals. The new model becomes the
served one only if its MRR@10 is above both; otherwise training says so in one plain line and keeps
the better model (``--force`` overrides). The comparison is written to ``TRAIN_REPORT`` in the data dir,
where ``nextpara info`` reads it.

Early stopping and the word-weight boost were chosen on the same validation split (a different
sample of 1,000 queries), which favours the new model slightly: the guard is a floor, not a measurement
(that is ``nextpara eval``, on the test split).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nextpara.store.snapshot import fsync_dir

from .evaluation import Evaluation
from .metrics import summarize
from .model import NextParagraphModel
from .pipeline import RerankPipeline

GUARD_QUERIES = 2000
GUARD_CONTEXT = 4  # L of the protocol's main table
TRAIN_REPORT = "train_report.json"
METRIC = "mrr@10"


@dataclass
class Verdict:
    serve_new: bool
    line: str  # the one plain line training prints
    figures: dict[str, dict] = field(default_factory=dict)  # "new", "replaced" (if any), "B1": summarize() + name
    replaced: str = ""  # what the new model would replace: "trained <version>", "general <version>" or ""


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


def _fmt(f: dict) -> str:
    lo, hi = f[f"{METRIC}_ci"]
    return f"{f[METRIC]:.3f} [{lo:.3f}, {hi:.3f}]"


def decide(figures: dict[str, dict], replaced: str, force: bool) -> Verdict:
    """Serve the new model iff its validation MRR@10 is above B1's and the replaced model's (or ``force``)."""
    new, b1, old = figures["new"], figures["B1"], figures.get("replaced")
    rivals = {"B1 (cosine to the last paragraph)": b1, **({replaced: old} if old else {})}
    beaten = [name for name, f in rivals.items() if new[METRIC] <= f[METRIC]]
    against = " and ".join(f"{name} {_fmt(f)}" for name, f in rivals.items())
    if not beaten:
        overlap = any(new[f"{METRIC}_ci"][0] <= f[f"{METRIC}_ci"][1] for f in rivals.values())
        line = (f"serving the new model: validation MRR@10 {_fmt(new)} against {against}"
                + (" (the intervals overlap: the gain may be noise)" if overlap else ""))
        return Verdict(True, line, figures, replaced)
    if force:
        return Verdict(True, f"serving the new model because of --force, though its validation MRR@10 {_fmt(new)} is "
                             f"not above {' nor '.join(beaten)} ({against})", figures, replaced)
    if not old:  # nothing else can serve this store (no general model for its embedder): the new model is the better
        return Verdict(True, f"serving the new model, the only one for this store, though its validation MRR@10 "
                             f"{_fmt(new)} is not above {against}", figures, replaced)
    line = (f"kept {replaced}: the new model's validation MRR@10 {_fmt(new)} is not above {' nor '.join(beaten)} "
            f"({against}); `nextpara train --force` serves it anyway")
    if old[METRIC] <= b1[METRIC]:
        line += f"; plain cosine (B1) scores at least as well as {replaced} on this store"
    return Verdict(False, line, figures, replaced)


def write_report(data_dir: Path, verdict: Verdict, model_version: str, extra: dict | None = None) -> None:
    """TRAIN_REPORT in ``data_dir``, written atomically (a kill leaves the old report or the new one)."""
    report = {**asdict(verdict), "new_model_version": model_version,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    path = Path(data_dir) / TRAIN_REPORT
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_report(data_dir: Path) -> dict | None:
    path = Path(data_dir) / TRAIN_REPORT
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
