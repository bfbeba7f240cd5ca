"""The one vector check: every vector that enters nextpara (an embedder's output, a document's
supplied vectors, a caller's raw context or candidate, a search query) passes through
:func:`unit_rows`, which checks the dimension, finite values and a non-zero norm, and returns
L2-normalised float32 rows, so that inner product is cosine everywhere.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from nextpara.errors import InvalidInputError, Reason

TINY_NORM = 1e-18  # below it float32's squares may have underflowed: such a vector's norm is taken from a rescaled copy


def unit_rows(rows, dim: int | None = None, where: str = "vectors", embedder: str = "",
              name: Callable[[int], str] | None = None, field: Callable[[int], str] | None = None) -> np.ndarray:
    """(n, dim) float32 unit vectors from ``rows`` (a 2-d array or a list of number sequences).

    Raises InvalidInputError naming the first bad row as ``name(i)`` (default ``"{where} row {i}"``)
    and what is wrong with it (reason DIMENSION_MISMATCH or INVALID_VECTOR, and ``field(i)`` as its field when
    given); ``embedder`` names whose dimension ``dim`` is. Without ``dim`` the first row's is every row's: a row of
    another length is a DIMENSION_MISMATCH too.
    """
    name = name or (lambda i: f"{where} row {i}")

    def bad_row(i: int, problem: str, reason: Reason = Reason.INVALID_VECTOR, **metadata) -> InvalidInputError:
        return InvalidInputError(f"{name(i)}: {problem}", reason=reason, field=field(i) if field else None,
                                 metadata=metadata)

    try:
        arr = _matrix(rows, dim)
    except OverflowError:  # the row is found below
        arr = None
    if arr is None or (dim is not None and arr.shape[1] != dim):
        want = dim
        for i, row in enumerate(rows):  # say which row is wrong, and how
            try:
                if not is_vector(row) or _matrix([row], None) is None:
                    raise bad_row(i, "a vector must be a list of numbers")
            except OverflowError:  # an integer beyond any float (10**400)
                raise bad_row(i, "a value is too large for a float") from None
            if want is None:  # no dimension asked: the rows' is the first one's (ragged rows differ from it)
                want = len(row)
            elif len(row) != want:
                whose = ("the first has" if dim is None else f"this store's embedder {embedder} has" if embedder
                         else "expected")
                raise bad_row(i, f"vector of dimension {len(row)}, {whose} dimension {want}", Reason.DIMENSION_MISMATCH,
                              expectedDim=want, actualDim=len(row))
        raise InvalidInputError(f"{where}: expected a list of vectors, got {np.shape(rows)}", reason=Reason.INVALID_VECTOR)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        finite = np.isfinite(np.asarray(rows[i], dtype=np.float64)).all()  # 1e39: finite, but not in float32
        raise bad_row(i, "a value is beyond float32's range (±3.4e38)" if finite else "vector has a NaN or infinite value")
    with np.errstate(over="ignore", under="ignore"):  # the rows below are rescaled
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
    odd = ~np.isfinite(norms[:, 0]) | (norms[:, 0] < TINY_NORM)  # float32's sum of squares over- or underflowed
    if odd.any():  # such rows scaled by their largest value first (the direction is what counts): 1e30s and 1e-25s
        arr = arr.copy()
        peak = np.abs(arr[odd]).max(axis=1, keepdims=True)
        zero = np.flatnonzero(odd)[peak[:, 0] == 0]
        if len(zero):
            raise bad_row(int(zero[0]), "vector is all zeros (the zero vector)")
        arr[odd] /= peak
        norms[odd] = np.linalg.norm(arr[odd], axis=1, keepdims=True)
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


def _matrix(rows, dim: int | None) -> np.ndarray | None:
    """``rows`` as a 2-d float32 array, or None when they are not one (ragged, not numbers, not 2-d)."""
    if not len(rows):
        return np.zeros((0, dim or 0), np.float32)
    try:
        with np.errstate(over="ignore"):  # a float beyond float32 becomes inf, which the caller refuses by name
            arr = np.asarray(rows, dtype=np.float32)
    except (ValueError, TypeError):
        return None
    return arr if arr.ndim == 2 else None


def is_vector(item) -> bool:
    """True for what a caller means as a raw vector: a list, tuple or array (not a text or bytes)."""
    return isinstance(item, (Sequence, np.ndarray)) and not isinstance(item, (str, bytes))
