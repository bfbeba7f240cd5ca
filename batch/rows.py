"""Input rows of a batch job and the output rows made from them.

An input row is a JSON object (one per line of a JSON Lines file, or one per row of a Parquet
file)::

    {"id": "q1", "context": [...], "candidates": [...], "top_k": 10}

``id`` is a string or an integer, unique in the file. ``context`` lists the paragraphs so far,
oldest first, and ``candidates`` (optional) the paragraphs to rank; each item is a text, a
stored paragraph id (an integer) or a vector (a list of numbers). Without ``candidates`` the
row is answered like PredictNext: retrieve from the store, then rerank. ``top_k`` (optional)
overrides the job's default; it limits how many results the output row keeps. A row with candidates
may say ``"top_k": 0`` to keep every candidate, ranked, as the Rerank RPC reads 0.

An output row is ``{"id", "results": [...]}`` (plus ``context_dropped`` when the context was
longer than the model reads), or ``{"id", "line", "error"}`` for a row that could not be scored.
Rerank results are ``{"candidate": index into candidates, "score"}`` (plus ``paragraph_id`` when
the candidate was given as one); retrieval results are ``{"paragraph_id", "doc_id", "position",
"score", "retrieval_score"}`` plus ``text`` unless the job omits texts.

JSON is read and written with orjson when it is installed, else with the standard library's json; both
give the same rows and the same messages (a line orjson refuses, or reads into a row that fails a
check, is read again by json, which decides). This module imports nothing heavy (errors.py is plain
Python, orjson has no dependencies): the service engine runs on a client-only install.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nextpara.errors import InvalidInputError, not_utf8

try:
    import orjson  # the parser of choice; tests set this to None to run the json path
except ModuleNotFoundError:  # pragma: no cover - orjson is a dependency, json stands in without it
    orjson = None

MAX_TOP_K = 1000
FIELDS = ("id", "context", "candidates", "top_k")


class RowError(InvalidInputError):
    """A row that cannot be scored; the message says why."""


@dataclass
class Row:
    line: int  # 1-based line of a JSON Lines file, or 1-based row of a Parquet file
    id: Any = None  # the row's id as given (str or int), None when it could not be read
    context: Any = None  # a list of items, or a row's vectors as one 2-d array (Parquet, or scoring.vectors_as_arrays)
    candidates: Any = None  # the same, or None
    top_k: int = 10
    error: str | None = None  # set when the row is bad: the job writes an error row

    @property
    def key(self) -> str | None:
        """The id as a resume key (1 and "1" are different ids)."""
        return None if self.id is None else json.dumps(self.id)


def count_rows(path: str | Path) -> int | None:
    """Rows in the input (non-blank lines, or Parquet rows) for the progress bar; None if unknown."""
    path = Path(path)
    if is_parquet(path):
        try:
            import pyarrow as pa

            from .parquet_rows import checked_file
        except ModuleNotFoundError as e:
            raise needs_pyarrow(path) from e
        try:
            return checked_file(path, FIELDS).metadata.num_rows
        except pa.ArrowException as e:  # the file is read here first: a damaged or empty one stops the job at once
            raise RowError(f"{path}: not a Parquet file pyarrow can read ({str(e).strip().splitlines()[0]})") from e
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += bool(line.strip())
    return n


def needs_pyarrow(path: Path) -> RowError:
    return RowError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or give JSON Lines")


def is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def read_raw(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, raw row) pairs; a raw row is the text of a JSON line or a dict from Parquet."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"input {path} does not exist")
    if is_parquet(path):
        try:
            from .parquet_rows import read_parquet
        except ModuleNotFoundError as e:
            raise needs_pyarrow(path) from e
        yield from read_parquet(path, FIELDS)
        return
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                yield n, raw.rstrip(b"\r\n")  # (a row cut short: its error's column is at its end, not 1 of the next)


def parse_row(line: int, raw: Any, default_top_k: int) -> Row:
    """A checked Row; a bad one carries ``error`` (its id too, when the id could be read).

    ``raw``: the text of a JSON line, or a dict (from Parquet, where a column of vectors may hold a
    2-d array per row)."""
    if orjson is None or not isinstance(raw, (bytes, str)):
        return _checked_row(line, raw, default_top_k, json.loads)
    row = _checked_row(line, raw, default_top_k, orjson.loads)
    if row.error is not None:
        # json decides what a bad line says; it also reads what orjson refuses (NaN, 1e999, lone surrogates) and
        # integers beyond 64 bits, which orjson turns into floats that fail the id and item checks
        row = _checked_row(line, raw, default_top_k, json.loads)
    return row


def _checked_row(line: int, raw: Any, default_top_k: int, json_loads) -> Row:
    row = Row(line=line, top_k=default_top_k)
    try:
        if isinstance(raw, (bytes, str)):
            try:
                raw = json_loads(raw)
            except UnicodeDecodeError as e:
                raise RowError(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
            except json.JSONDecodeError as e:
                raise RowError(f"malformed JSON: {e.msg} at column {e.colno}") from e
        if not isinstance(raw, dict):
            raise RowError(f"expected a JSON object, got {type(raw).__name__}")
        row.id = _check_id(raw.get("id"))
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise RowError(f"unknown field {unknown[0]!r} (a row has {', '.join(FIELDS)})")
        row.context = _check_items(raw.get("context"), "context", required=True)
        row.candidates = _check_items(raw.get("candidates"), "candidates", required=False)
        if raw.get("top_k") is not None:
            row.top_k = check_top_k(raw["top_k"], "top_k", every=row.candidates is not None)
    except RowError as e:
        row.error = str(e)
        if not isinstance(row.id, (str, int)):
            row.id = None
    return row


def check_top_k(value: Any, where: str, every: bool = False) -> int:
    """``value`` as a number of results kept: 1 to MAX_TOP_K, or with ``every`` (a row with candidates) also 0, every
    candidate."""
    if isinstance(value, bool) or not isinstance(value, int) or not (0 if every else 1) <= value <= MAX_TOP_K:
        if type(value) is int and value == 0 and where == "top_k":  # a row's; the job's -k is never 0
            raise RowError(f"{where} 0 (every candidate) is for a row with candidates; a row without them keeps 1 to "
                           f"{MAX_TOP_K} results")
        raise RowError(f"{where} must be an integer from {0 if every else 1} to {MAX_TOP_K}, got {value!r}")
    return value


def _check_id(value: Any) -> str | int:
    if value is None:
        raise RowError("missing id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowError(f"id must be a string or an integer, got {type(value).__name__}")
    if isinstance(value, str) and not value:
        raise RowError("id is empty")
    return value


NUMBER_TYPES = frozenset((int, float))  # what JSON numbers parse to; bool (a subclass of int) is not one


def _check_items(value: Any, name: str, required: bool) -> list | None:
    """The shape of a context or candidate list; dimensions and ids are checked by the scorer."""
    if value is None:
        if required:
            raise RowError(f"missing {name}")
        return None
    if getattr(value, "ndim", None) == 2 and len(value):  # a Parquet row's vectors, checked by the scorer
        return value
    if not isinstance(value, list):
        raise RowError(f"{name} must be a list of texts, paragraph ids or vectors, got {type(value).__name__}")
    if not value:
        raise RowError(f"{name} is empty")
    for i, item in enumerate(value):
        if isinstance(item, str):
            if not item.strip():
                raise RowError(f"{name}[{i}]: empty text")
            if (why := not_utf8(item)) is not None:
                raise RowError(f"{name}[{i}]: the text {why}")
        elif isinstance(item, bool) or item is None or isinstance(item, (float, dict)):
            raise RowError(f"{name}[{i}]: expected a text, a paragraph id or a vector, got {json.dumps(item)[:40]}")
        elif isinstance(item, list):
            if not item or not NUMBER_TYPES.issuperset(map(type, item)):  # one pass in C, not a check per number
                raise RowError(f"{name}[{i}]: a vector must be a non-empty list of numbers")
    return value


# ---- output rows --------------------------------------------------------------------------
def error_output(row: Row, message: str) -> dict:
    return {"id": row.id, "line": row.line, "error": message}


def rerank_output(row: Row, order: list[int], scores: list[float], context_dropped: int) -> dict:
    results = []
    for index, score in zip(order[:row.top_k or None], scores):  # top_k 0: every candidate
        item = {"candidate": index, "score": score}
        cand = row.candidates[index]
        if isinstance(cand, int):
            item["paragraph_id"] = cand
        results.append(item)
    return _with_dropped({"id": row.id, "results": results}, context_dropped)


def predict_output(row: Row, predictions: list, context_dropped: int, with_text: bool) -> dict:
    """``predictions``: objects with paragraph_id, doc_id, position, score, retrieval_score, text."""
    results = []
    for p in predictions[:row.top_k]:
        item = {"paragraph_id": p.paragraph_id, "doc_id": p.doc_id, "position": p.position, "score": p.score,
                "retrieval_score": p.retrieval_score}
        if with_text:
            item["text"] = p.text
        results.append(item)
    return _with_dropped({"id": row.id, "results": results}, context_dropped)


def _with_dropped(out: dict, dropped: int) -> dict:
    if dropped:
        out["context_dropped"] = dropped
    return out


def dumps(out: dict) -> bytes:
    """One output line. Numbers that JSON cannot hold raise ValueError with either parser (orjson would write
    NaN as null, so json writes what has one); an integer beyond 64 bits is written by json."""
    if orjson is not None and all(_finite(r) for r in out.get("results", ())):
        try:
            return orjson.dumps(out, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            pass
    return (json.dumps(out, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _finite(result: dict) -> bool:
    return all(math.isfinite(v) for v in result.values() if type(v) is float)
