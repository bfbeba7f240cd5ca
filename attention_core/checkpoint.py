"""Self-describing model checkpoints in safetensors: loading never unpickles anything.

``model.safetensors`` in the data directory holds the weights and, in its metadata, one JSON
document: the model config (the loader rebuilds the model from it), the embedder name and
dimension, the training corpus fingerprint, validation metrics, training config, code version
and the model version (a hash of the weights, and of the transition memory weight: model_version) that responses
name. Written to a temporary
file, fsynced and renamed, so a kill leaves the old checkpoint or the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch
from nextpara.errors import FailedPreconditionError, Reason, StorageFullError
from nextpara.store.data_dir import disk_full
from nextpara.store.snapshot import fsync_dir
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .model import NextParagraphModel
from .model_config import LATER_FIELDS, RerankerConfig, saved_config
from .served import META_KEY, check_embedder, read_checkpoint_meta


def code_version() -> str:
    from nextpara import __version__

    return __version__


def weights_version(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def model_version(weights: str, cfg) -> str:
    """A checkpoint's version from its weights' hash (weights_version): that hash, and for a model with a transition
    memory weight (a config field, not a tensor) that weight's too, since the same weights fitted with another weight
    rank otherwise (a training whose fit changed, rerun on the same data, makes the same weights). Checkpoints saved
    before 2026-12-05 carry the weights' hash alone (versions())."""
    if not cfg.memory_boost:
        return weights
    return hashlib.sha256(f"{weights} memory_boost {float(cfg.memory_boost)!r}".encode()).hexdigest()[:12]


def versions(model: NextParagraphModel) -> tuple[str, str]:
    """The versions a checkpoint of ``model`` may rightly carry: its model_version, then the weights' hash alone (what
    every checkpoint saved before the memory weight counted carries)."""
    weights = weights_version(model.state_dict())
    return model_version(weights, model.cfg), weights


def save_checkpoint(path: str | os.PathLike, model: NextParagraphModel, meta: dict) -> dict:
    """Save atomically; returns the full metadata written (with model_version)."""
    path = Path(path)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    # fields added since the first checkpoints are written only when they differ from what came before them, so that
    # older nextpara versions load the checkpoint of any model they could run
    config = {k: v for k, v in asdict(model.cfg).items() if not (k in LATER_FIELDS and LATER_FIELDS[k] == v)}
    meta = {**meta, "model_config": config, "model_version": model_version(weights_version(state), model.cfg),
            "code_version": code_version(), "format": 1,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = path.with_name(path.name + ".tmp")
    try:
        try:
            save_file(state, str(tmp), metadata={META_KEY: json.dumps(meta)})
        except SafetensorError as e:  # its writer's errors (a full disk) are not OSErrors: one, with the errno it names
            found = re.search(r"os error (\d+)", str(e))
            message = f"cannot write {tmp}: {e}"
            raise (OSError(int(found.group(1)), message) if found else OSError(message)) from e
        os.chmod(tmp, 0o666 & ~process_umask())  # safetensors writes 0600; a server running as another user must read it
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a part-written file would only take the space a retry needs
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return meta


@contextlib.contextmanager
def writing_in(data_dir: Path, what: str, kept: str):
    """Turn an OSError while writing ``what`` in ``data_dir`` into an error that says so and what ``kept`` serving:
    StorageFullError for a full file system, FailedPreconditionError for another (a read-only one, permissions)."""
    try:
        yield
    except OSError as e:
        if disk_full(e, data_dir):
            raise StorageFullError(f"no space left on the file system of {data_dir} while writing {what} ({e}): "
                                   f"{kept}. Free space and retry") from e
        raise FailedPreconditionError(f"cannot write {what} in {data_dir} ({e}): {kept}") from e


def process_umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, for a moment, for every thread)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):  # not Linux: set and restore it
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


def load_checkpoint(path: str | os.PathLike, expect_embedder: str | None = None,
                    expect_dim: int | None = None) -> tuple[NextParagraphModel, dict]:
    """Rebuild the model from the checkpoint's own config; refuse one trained for another embedder."""
    path = Path(path)
    if not path.exists():
        raise FailedPreconditionError(f"no trained model at {path}: run `nextpara train`", reason=Reason.NO_MODEL)
    meta = read_checkpoint_meta(path)
    check_embedder(meta, path, expect_embedder, expect_dim)
    known = {f.name for f in fields(RerankerConfig)}
    unknown = sorted(set(meta["model_config"]) - known)
    if unknown:
        raise FailedPreconditionError(f"{path} was saved by a newer nextpara ({meta.get('code_version', 'unknown')}): "
                                      f"its model has settings this version lacks: {', '.join(unknown)}",
                                      reason=Reason.MODEL_UNREADABLE)
    model = NextParagraphModel(RerankerConfig(**saved_config(meta["model_config"])))
    try:
        state = load_file(str(path))
    except SafetensorError as e:
        raise FailedPreconditionError(f"{path}: unreadable weights ({e})", reason=Reason.MODEL_UNREADABLE) from e
    model.load_state_dict(state)
    model.eval()
    return model, meta
