"""Which model serves a store, read from file headers alone: no weights, no torch.

A store is served by its own checkpoint (``model.safetensors`` in its data dir: a trained model, or the guard's
plain cosine), else by the general model that ships with the package (general.py says what it is and loads it).
What ``nextpara info``, GetInfo and a batch job's checks say about that model comes from here: the checkpoint's
metadata (a safetensors header, read without its tensors), its scorer's name (model_config.py), and the report of
the last guard that judged it (guard.py writes ``train_report.json``). So ``nextpara info`` answers without
importing torch, and the server's answer is the same as the CLI's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from nextpara.errors import FailedPreconditionError, Reason, StoreMismatchError
from safetensors import SafetensorError, safe_open

from .model_config import memory_weight, scorer_name

if TYPE_CHECKING:  # (the store's module loads faiss: reading headers needs neither)
    from nextpara.store.data_dir import StoreFacts
    from nextpara.store.store import ParagraphStore

CHECKPOINT = "model.safetensors"
META_KEY = "nextpara"
GENERAL_CHECKPOINT = Path(__file__).with_name("general.safetensors")  # serves a store without a model of its own
GENERAL_VERSION = "1b40d518e9b2"  # the version general.safetensors carries (checkpoint.versions); written by
#                                   bench/quality/train_general.py
START_CHECKPOINT = Path(__file__).with_name("general_start.safetensors")  # where `nextpara train` starts
START_VERSION = "8ce44321e534"  # the version general_start.safetensors carries; written by the same script
SHIPPED = {GENERAL_CHECKPOINT: GENERAL_VERSION, START_CHECKPOINT: START_VERSION}
COSINE = "cosine"  # a checkpoint's meta["kind"] (and describe_served's source and scorer) for general.cosine_model()
COSINE_NAME = "plain cosine (B1)"  # how the guard names it when it serves
TRAIN_REPORT = "train_report.json"  # the last guard's comparison (guard.py), in the data dir
METRIC = "mrr@10"  # what the guard judges by, and info shows first


def general_name(version: str) -> str:
    """How the guard (training's, or a build's: build_guard.py) names the general model it judged (train_report.json's
    ``replaced``), which describe_served matches to show those figures beside the version that serves."""
    return f"the general model {version}"


def fits(meta: dict, store: ParagraphStore | StoreFacts) -> str:
    """Empty if a checkpoint's embedder is the store's, else why not (the general model's message)."""
    emb = meta.get("embedder", {})
    if (emb.get("name"), emb.get("dim")) == (store.embedder_name, store.dim):
        return ""
    return (f"the general model is for {emb.get('name')} ({emb.get('dim')}-d), the store uses {store.embedder_name} "
            f"({store.dim}-d)")


def fallback_line(mismatch: str) -> str:
    """Why plain cosine serves a store that has no model of its own and that the general model does not fit."""
    return (f"no model of its own, and {mismatch}: plain cosine to the last paragraph (B1) serves it until `nextpara "
            "train` trains a model that beats it")


def missing_shipped(path: Path, what: str = "the general model",
                    advice: str = ", or train a model of this store with `nextpara train`") -> FailedPreconditionError:
    """A checkpoint the package ships (SHIPPED) that is not there: an installation that lost it, and what to do."""
    return FailedPreconditionError(f"{what} is missing from this installation ({path}): reinstall nextpara[server]"
                                   f"{advice}", reason=Reason.NO_MODEL)


def looks_pickled(path: str | os.PathLike) -> bool:
    """Whether a file begins as a pickle does (protocol 2 and above) or as torch.save's zip of one."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(b"PK\x03\x04") or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


def read_checkpoint_meta(path: str | os.PathLike) -> dict:
    """A checkpoint's nextpara metadata (its safetensors header; no tensor is read). FailedPreconditionError for a
    file that is not there (NO_MODEL) or is not a nextpara safetensors checkpoint."""
    if os.path.isdir(path):  # safetensors says only "No such device (os error 19)"
        raise FailedPreconditionError(f"{path} is a directory: give the checkpoint file in it (model.safetensors of a "
                                      "data dir, say)", reason=Reason.MODEL_UNREADABLE)
    try:
        with safe_open(str(path), framework="numpy") as f:
            raw = (f.metadata() or {}).get(META_KEY)
    except FileNotFoundError as e:  # not a file that is not a checkpoint: no file
        raise FailedPreconditionError(f"{path}: no such checkpoint file", reason=Reason.NO_MODEL) from e
    except (SafetensorError, OSError, ValueError) as e:
        why = ("it looks like a pickle (torch.save's format); pickled checkpoints are refused, they could run code "
               "when loaded" if looks_pickled(path) else "the file is unreadable, cut short or of another format")
        raise FailedPreconditionError(f"{path} is not a nextpara safetensors checkpoint ({e}): {why}",
                                      reason=Reason.MODEL_UNREADABLE) from e
    if raw is None:
        raise FailedPreconditionError(f"{path} has no nextpara metadata: not a nextpara checkpoint",
                                      reason=Reason.MODEL_UNREADABLE)
    return json.loads(raw)


def check_embedder(meta: dict, path: str | os.PathLike, expect_embedder: str | None = None,
                   expect_dim: int | None = None) -> None:
    """StoreMismatchError if the checkpoint at ``path`` (its ``meta``) was trained for another embedder or dimension."""
    emb = meta.get("embedder", {})
    if expect_embedder is not None and emb.get("name") != expect_embedder:
        raise StoreMismatchError(f"{path} was trained on embedder {emb.get('name')!r}, the store uses {expect_embedder!r}",
                                 reason=Reason.EMBEDDER_MISMATCH,
                                 metadata={"modelEmbedder": emb.get("name"), "storeEmbedder": expect_embedder})
    if expect_dim is not None and emb.get("dim") != expect_dim:
        raise StoreMismatchError(f"{path} was trained on dimension {emb.get('dim')}, the store has {expect_dim}",
                                 reason=Reason.EMBEDDER_MISMATCH, metadata={"modelDim": emb.get("dim"), "storeDim": expect_dim})


def read_report(data_dir: Path) -> dict | None:
    """The last guard's report in ``data_dir`` (guard.write_report), or None where there is none or it is unreadable."""
    path = Path(data_dir) / TRAIN_REPORT
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def fmt(f: dict, metric: str = METRIC) -> str:
    """A figure with its 95% interval: ``0.158 [0.144, 0.172]``."""
    lo, hi = f[f"{metric}_ci"]
    return f"{f[metric]:.3f} [{lo:.3f}, {hi:.3f}]"


def kept_cosine(report: dict | None) -> bool:
    """Whether a guard's report is of a training that kept plain cosine serving (its figures: "replaced" and "B1")."""
    return bool(report and report.get("replaced") == COSINE_NAME and not report.get("serve_new")
                and "replaced" in report.get("figures", {}))


def describe_served(store: ParagraphStore | StoreFacts) -> dict:
    """Which model serves ``store`` (an open store, or only its facts: data_dir, embedder_name and dim are all it reads)
    and its validation figures beside B1's, without loading any weights (nor torch, but for a store no general model
    fits): ``source`` "trained", COSINE (with ``reason``: the guard's line, or why no model fits), "general" or "none"
    (with ``reason``),
    ``model_version``, ``scorer`` (model_config.SCORERS' name of its configuration, COSINE, or "custom"), for a model
    ``memory_weight`` (the transition memory's, transitions.py; 0: none), and ``validation``
    ({"model": ..., "B1": ...}, summarize() dicts) when a guard (`nextpara train`'s, or for the general model
    `nextpara build`'s) measured them on this store."""
    own = store.data_dir / CHECKPOINT
    if own.exists():
        try:
            meta = read_checkpoint_meta(own)
        except FailedPreconditionError as e:  # `nextpara info` still describes the store, and says why none serves
            return {"source": "none", "reason": f"{e}; `nextpara train` replaces it, and without it the general model "
                                                "serves"}
        guard = meta.get("metrics", {}).get("guard", {})
        if meta.get("kind") == COSINE:  # the figures and line of the last `nextpara train` that judged it, if that kept it
            report = read_report(store.data_dir)  # (a report older than the checkpoint is of another training)
            if kept_cosine(report) and report.get("date", "") >= meta.get("saved_at", ""):
                figures, line = {"model": report["figures"]["replaced"], "B1": report["figures"]["B1"]}, report["line"]
            else:
                figures, line = {"model": guard["B1"], "B1": guard["B1"]} if guard else None, meta.get("line", "")
            return {"source": COSINE, "model_version": meta["model_version"], "scorer": COSINE, "reason": line,
                    **({"validation": figures} if figures else {})}
        out = {"source": "trained", "model_version": meta["model_version"], "started_from": meta.get("started_from", ""),
               "scorer": scorer_name(meta.get("model_config", {})),
               "memory_weight": memory_weight(meta, general=False)}
        if guard:
            out["validation"] = {"model": guard["new"], "B1": guard["B1"]}
        return out
    if not GENERAL_CHECKPOINT.exists():  # as general.load_general says it (the server's log, PredictNext)
        return {"source": "none", "reason": str(missing_shipped(GENERAL_CHECKPOINT))}
    try:
        meta = read_checkpoint_meta(GENERAL_CHECKPOINT)
    except FailedPreconditionError as e:
        return {"source": "none", "reason": str(e)}
    mismatch = fits(meta, store)
    if mismatch:  # as general.served_model serves it
        from .general import cosine_version  # (torch: only for a store no general model fits)

        out = {"source": COSINE, "model_version": cosine_version(store.dim), "scorer": COSINE}
        report = read_report(store.data_dir)  # a training that kept it: its line and figures
        if kept_cosine(report):
            return {**out, "reason": report["line"], "validation": {"model": report["figures"]["replaced"],
                                                                    "B1": report["figures"]["B1"]}}
        return {**out, "reason": fallback_line(mismatch), "fallback": True}  # (no guard chose it)
    out = {"source": "general", "model_version": meta["model_version"], "scorer": scorer_name(meta.get("model_config", {})),
           "memory_weight": memory_weight(meta, general=True)}
    report = read_report(store.data_dir)  # the last guard (a training's or a build's) judged this general model
    if report and "replaced" in report["figures"] and report["replaced"] == general_name(meta["model_version"]):
        out["validation"] = {"model": report["figures"]["replaced"], "B1": report["figures"]["B1"]}
    return out
