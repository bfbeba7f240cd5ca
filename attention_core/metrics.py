"""Ranking metrics of the evaluation protocol: Recall@k and MRR@10 with 95% bootstrap intervals."""

from __future__ import annotations

import numpy as np

NO_HIT = 10**9


def hit_rank(ranked_classes: np.ndarray, target_class: int) -> int:
    """1-based rank of the first result whose text class equals the target's, NO_HIT if none."""
    hits = np.flatnonzero(np.asarray(ranked_classes) == target_class)
    return int(hits[0]) + 1 if len(hits) else NO_HIT


def per_query(ranks: np.ndarray) -> dict[str, np.ndarray]:
    ranks = np.asarray(ranks)
    return {"recall@1": (ranks <= 1).astype(float), "recall@10": (ranks <= 10).astype(float),
            "mrr@10": np.where(ranks <= 10, 1.0 / ranks, 0.0)}


def summarize(ranks: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict[str, float | list[float]]:
    """Mean of each metric and its 95% bootstrap interval over queries (``<metric>_ci``)."""
    return bootstrap(per_query(ranks), n_boot, seed)


def paired_gain(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict[str, float | list[float]]:
    """Mean of b - a per query for Recall@1 and MRR@10, ranks ``a`` and ``b`` of the same queries, with a 95%
    bootstrap interval over queries (the same queries resampled for both: paired, so the interval is of the
    difference itself, much narrower than two separate intervals suggest)."""
    if len(a) != len(b):
        raise ValueError(f"paired ranks of {len(a)} and {len(b)} queries: a pair needs the same queries")
    pa, pb = per_query(a), per_query(b)
    return bootstrap({name: pb[name] - pa[name] for name in ("recall@1", "mrr@10")}, n_boot, seed)


def bootstrap(values: dict[str, np.ndarray], n_boot: int, seed: int) -> dict[str, float | list[float]]:
    """Each per-query array's mean and, over at least one query, its 95% bootstrap interval (``<name>_ci``); every
    array resampled with the same picks of queries."""
    n = len(next(iter(values.values())))
    out: dict[str, float | list[float]] = {}
    picks = np.random.default_rng(seed).integers(0, n, size=(n_boot, n)) if n else None
    for name, v in values.items():
        out[name] = float(v.mean()) if n else 0.0
        if picks is not None:
            boots = v[picks].mean(axis=1)
            out[f"{name}_ci"] = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]
    return out
