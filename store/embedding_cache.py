"""An on-disk cache of embeddings keyed by (embedder name, sha256 of the text).

Re-ingesting unchanged text costs no model time. The cache is one SQLite file (WAL
mode), shared by every data directory of a user: ``$NEXTPARA_CACHE_DIR/embeddings.sqlite``,
by default under ``$XDG_CACHE_HOME/nextpara`` (``~/.cache/nextpara``). It is only a cache:
deleting it loses nothing but time.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np

from .corpus import text_hash
from .embedders import Embedder
from .tables import select_in


def default_cache_path() -> Path:
    root = os.environ.get("NEXTPARA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nextpara")
    return Path(root) / "embeddings.sqlite"


class CachedEmbedder:
    """Wraps an embedder; looks every text up in the cache before asking the model."""

    def __init__(self, inner: Embedder, path: str | os.PathLike | None = None):
        self.inner = inner
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (embedder TEXT NOT NULL, text_hash TEXT NOT NULL,"
            " dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (embedder, text_hash)) WITHOUT ROWID")
        self.hits = 0
        self.misses = 0
        # whose vectors a row holds: the model's name, and for a remote model the endpoint too (two endpoints may serve
        # different models under one name)
        self.key = getattr(inner, "cache_key", inner.name)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int | None:
        return self.inner.dim

    @property
    def remote(self) -> bool:
        return getattr(self.inner, "remote", False)

    def _lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        rows = select_in(self._db, "SELECT text_hash, vector FROM embeddings WHERE embedder = ? AND text_hash",
                         dict.fromkeys(hashes), [self.key])
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        hashes = [text_hash(t) for t in texts]
        found = self._lookup(hashes)
        missing = list(dict.fromkeys(h for h in hashes if h not in found))
        self.hits += len(texts) - len(missing)  # a text repeated in the call is embedded once: the rest are hits
        if missing:
            first_text = {h: t for h, t in zip(hashes, texts)}
            vectors = self.inner.embed([first_text[h] for h in missing])
            self.misses += len(missing)  # what the model embedded
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)",
                    [(self.key, h, vectors.shape[1], vectors[i].tobytes()) for i, h in enumerate(missing)])
            found.update({h: vectors[i] for i, h in enumerate(missing)})
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return np.stack([found[h] for h in hashes]).astype(np.float32, copy=False)

    def close(self) -> None:
        self._db.close()
