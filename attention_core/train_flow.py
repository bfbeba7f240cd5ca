"""``nextpara train`` from start to finish: where training starts, the fit, the guard, what serves after.

1. Start: the general model's fine-tuning start (general.py: its mixture and recipe without ``list_norm``),
   so that a corpus's training adapts rather than relearns; from scratch with ``from_scratch``, or when
   that model does not fit the store (another embedder) or the model configuration asked for differs
   from its own.
2. Fit: training.py's Trainer, on the store's training split, early stopping on its validation split.
3. Guard (guard.py): the new model, the model it would replace (what serves when training ends: the guard after a
   build may have changed it meanwhile; the store's model lock keeps the two apart) and B1 on the validation
   split; the new model is saved as the store's ``model.safetensors`` only if it beats both (or ``force``);
   where B1 is at least as good as the new model and above the one that serves, general.cosine_model is saved
   there instead, and plain cosine serves.
A store too small for a validation split trains nothing and keeps what serves it, saying why.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from nextpara.errors import FailedPreconditionError, InvalidInputError, Reason, StoreMismatchError
from nextpara.store.store import open_store

from .checkpoint import load_checkpoint, save_checkpoint, versions, writing_in
from .general import cosine_model, general_for_store, load_general, save_cosine
from .guard import decide, validation_figures, write_report
from .model import NextParagraphModel
from .model_config import RerankerConfig, store_model_config
from .sequences import ParagraphSequences
from .served import CHECKPOINT, COSINE, COSINE_NAME, START_CHECKPOINT, fits, general_name
from .train_config import TrainConfig
from .training import TooLittleData, Trainer

log = logging.getLogger(__name__)


@dataclass
class TrainOutcome:
    meta: dict | None  # the new model's metadata, saved or not; None when nothing could be trained
    served: bool  # the new model is now the store's model.safetensors
    line: str  # one plain line: what serves the store now, and why
    cosine: bool = False  # plain cosine (B1) serves the store now (chosen by this training's guard, or kept)


def corpus_fingerprint(seq: ParagraphSequences) -> str:
    """Identity of the training corpus: doc ids and paragraph texts, in order."""
    h = hashlib.sha256()
    for doc, rows in seq.doc_rows.items():
        h.update(doc.encode() + b"\0" + seq.text_class[rows].tobytes())
    return h.hexdigest()[:16]


def starting_point(store, model_cfg: RerankerConfig, from_scratch: bool, start_model: Path | None = None
                   ) -> tuple[dict | None, str]:
    """(weights to start from or None, what they are, in words). ``start_model``: another general model's
    checkpoint than the shipped one (one bench.quality.train_general wrote, say), its weights checked against
    its own hash; when it is given, any reason it cannot be used raises instead of falling back to scratch."""
    if start_model is not None:
        start_model = Path(start_model)
        if from_scratch:
            raise InvalidInputError(f"a model to start from ({start_model}) and from scratch: one or the other")
        if not start_model.is_file():
            raise FailedPreconditionError(f"cannot start from {start_model}: no such checkpoint file",
                                          reason=Reason.NO_MODEL)
    if from_scratch:
        return None, "from scratch (--from-scratch)"
    try:
        general, meta = (load_general(START_CHECKPOINT) if start_model is None
                         else load_general(start_model, expect_version=""))
    except FailedPreconditionError as e:
        if start_model is not None:
            raise
        return None, f"from scratch: {e}"
    mismatch = fits(meta, store)
    differ = {k: v for k, v in asdict(model_cfg).items()
              if getattr(general.cfg, k) != v and k not in ("dropout", "memory_boost")}  # (fitted after training)
    if start_model is not None and (mismatch or differ):
        raise FailedPreconditionError(
            f"cannot start from {start_model}: "
            + (mismatch or f"its configuration differs in {differ}"),
            reason=Reason.EMBEDDER_MISMATCH if mismatch else Reason.FAILED_PRECONDITION)
    if mismatch:
        return None, f"from scratch: {mismatch}"
    if differ:
        return None, f"from scratch: the fine-tuning start's configuration ({START_CHECKPOINT.name}) differs in {differ}"
    return general.state_dict(), (f"from the fine-tuning start {meta['model_version']} ({START_CHECKPOINT.name})"
                                  if start_model is None else f"from the model {meta['model_version']} ({start_model.name})")


def replaced_model(store) -> tuple[NextParagraphModel | None, str]:
    """The model that serves the store now (its own, which may be plain cosine, else the general model, else plain
    cosine for a store the general model does not fit: general.served_model) and its name in words."""
    own = store.data_dir / CHECKPOINT
    if own.exists():
        try:
            model, meta = load_checkpoint(own, store.embedder_name, store.dim)
        except (FailedPreconditionError, StoreMismatchError) as e:  # it cannot serve this store: the general
            log.warning("the model in %s cannot serve it and will be replaced: %s", store.data_dir, e)  # model can
        else:
            return model, COSINE_NAME if meta.get("kind") == COSINE else f"the previous model {meta['model_version']}"
    try:
        model, meta = general_for_store(store)
    except StoreMismatchError:
        return cosine_model(store.dim), COSINE_NAME
    except FailedPreconditionError:  # the general model is missing from the installation
        return None, ""
    return model, general_name(meta["model_version"])


def train(data_dir, model_cfg: dict | None = None, cfg: TrainConfig | None = None, quiet: bool = False,
          from_scratch: bool = False, force: bool = False, start_model: Path | None = None) -> TrainOutcome:
    """Train on the store in ``data_dir``; the new model serves only if the guard says so (or ``force``).
    ``start_model``: a general model's checkpoint to start from instead of the shipped one (starting_point)."""
    cfg = cfg or TrainConfig()
    with open_store(data_dir, readonly=True) as store:
        seq = ParagraphSequences(store)
        mcfg = store_model_config(store.dim, cfg.max_context, model_cfg)
        state, start = starting_point(store, mcfg, from_scratch, start_model)
        if cfg.init_shrink < 1.0:
            if state is None:
                log.warning("--init-shrink %s does nothing when training starts %s", cfg.init_shrink, start)
            else:
                start += f", shrunk to {cfg.init_shrink} of it (the rest a fresh initialisation)"
        log.info("training %s", start)
        if state is not None and cfg.init_shrink == 1.0:  # the start's head, whole (TrainConfig.head_epochs)
            epochs = cfg.head_epochs(fine_tuning=True)
            if epochs == 0:
                log.info("phase 1: none, the starting model's query head kept (--finetune-phase1-epochs 0; phase 2's "
                         "query loss still trains it)")
            elif cfg.head_trial(fine_tuning=True):
                log.info("phase 1: up to %d query-head epochs while validation stage-1 recall rises; the starting "
                         "head comes back unless the trained one finds clearly more targets (--finetune-head train: "
                         "every epoch)", epochs)
            else:
                log.info("phase 1: %d query-head epochs, all kept (--finetune-head train)", epochs)
        try:
            trainer = Trainer(store, seq, mcfg, cfg, quiet=quiet, init_state=state)
        except TooLittleData as e:
            replaced = replaced_model(store)[1]
            return TrainOutcome(None, False, f"nothing trained: {e}; {store.data_dir} stays served by "
                                             f"{replaced or 'no model'}", replaced == COSINE_NAME)
        result = trainer.fit()
        meta = {"embedder": {"name": store.embedder_name, "dim": store.dim},
                "corpus_fingerprint": corpus_fingerprint(seq), "index_generation": store.index_generation,
                "started_from": start,
                "metrics": {"validation": result["validation"]},
                "training": {k: v for k, v in result.items() if k != "validation"}}
        with store.data_dir.model_lock("nextpara train's guard"):  # what serves now, not when training began
            return judge_and_save(store, seq, trainer.model, meta, force)


def judge_and_save(store, seq: ParagraphSequences, model: NextParagraphModel, meta: dict, force: bool) -> TrainOutcome:
    """The guard of step 3: the new ``model`` against what serves the store now and B1, and the verdict written (the
    new model, or plain cosine, as the store's checkpoint; the report). Called holding the store's model lock."""
    old_model, replaced = replaced_model(store)
    log.info("guard: the new model%s on the validation split", f" and {COSINE_NAME} (which serves)" if
             replaced == COSINE_NAME else f", {replaced or 'no previous model'} and B1")
    figures = validation_figures(store, seq, {"new": model, **({"replaced": old_model} if old_model else {})})
    version = versions(model)[0]
    same = old_model is not None and version == versions(old_model)[0]  # (weights and memory weight: checkpoint.py)
    verdict = decide(figures, replaced, force, same)
    meta["metrics"]["guard"] = figures
    serving = f"{store.data_dir} is still served by {replaced or 'no model'}"
    with writing_in(store.data_dir, "the new model" if verdict.serve_new else "plain cosine's checkpoint",
                    f"{serving} (the guard said: {verdict.line})"):
        if verdict.serve_new:
            meta = save_checkpoint(store.data_dir / CHECKPOINT, model, meta)
            serving = f"the new model {meta['model_version']} serves {store.data_dir}"
        elif verdict.serve_cosine:  # the store's checkpoint ranks by cosine from now on (its figures: the guard's)
            save_cosine(store, verdict.line, figures, store.index_generation,
                        corpus_fingerprint=meta["corpus_fingerprint"])
            serving = f"plain cosine (B1) serves {store.data_dir}"
    if not verdict.serve_new:
        meta["model_version"] = version
    with writing_in(store.data_dir, "the training report", f"{serving}; `nextpara info` shows the report before"):
        write_report(store.data_dir, verdict, meta["model_version"],
                     {"started_from": meta["started_from"], "index_generation": store.index_generation})
    cosine = verdict.serve_cosine or (replaced == COSINE_NAME and not verdict.serve_new)  # chosen now, or kept
    return TrainOutcome(meta, verdict.serve_new, verdict.line, cosine)
