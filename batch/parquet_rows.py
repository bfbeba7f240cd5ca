"""Parquet INPUT: raw rows for ``rows.parse_row``, a record batch at a time, vectors straight into NumPy.

A column of vector lists (a list, large list or fixed-size list of lists or fixed-size lists of
float32 / float64) goes from Arrow's buffers to NumPy: each row's cell is a ``(items, dim)`` view
of the batch's values, never Python floats. Its shape is checked here; its dimension and values
(NaN, zeros) by the scorer, which names the row's field and item. A row the view cannot stand for
(a null vector or value, an empty vector, vectors of different lengths) and every other column
(ids, texts, paragraph ids, ``top_k``) go through ``to_pylist``, so ``parse_row`` checks them and
names the row and field exactly as for JSON Lines.

Imported only for Parquet input: pyarrow (and numpy, which it needs) may be absent elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BATCH_ROWS = 1024
ITEM_FIELDS = ("context", "candidates")  # the fields that hold items; any other column is read as Python values


def checked_file(path: str | Path, fields: tuple[str, ...]) -> pq.ParquetFile:
    """The file, opened; a column that is none of ``fields`` is the file's error, before any row is read (as each
    row's unknown field it made every row an error, and the job a success)."""
    file = pq.ParquetFile(path)
    unknown = [name for name in file.schema_arrow.names if name not in fields]
    if unknown:
        from nextpara.errors import InvalidInputError

        raise InvalidInputError(f"{path}: unknown column{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} (a row "
                                f"has {', '.join(fields)})")
    return file


def read_parquet(path: str | Path, fields: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(1-based row number, {column: value}) per row, in file order (columns checked: ``checked_file``)."""
    n = 0
    for batch in checked_file(path, fields).iter_batches(batch_size=BATCH_ROWS):
        names = batch.schema.names
        for values in zip(*(column_cells(column, name in ITEM_FIELDS) for name, column in zip(names, batch.columns))):
            n += 1
            yield n, dict(zip(names, values))


def column_cells(column: pa.Array, items: bool = True) -> list[Any]:
    """One Python value per row: a 2-d array for a row of vectors (of a column of ``items``), else ``to_pylist``'s."""
    if not (items and is_vector_list(column.type)):
        return column.to_pylist()
    return _vector_cells(column)


def is_vector_list(t: pa.DataType) -> bool:
    return (_is_list(t) and _is_list(t.value_type)
            and (pa.types.is_float32(t.value_type.value_type) or pa.types.is_float64(t.value_type.value_type)))


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _lengths(lists: pa.Array) -> np.ndarray:
    """Elements per list, 0 for a null list (``flatten`` skips what a null list holds)."""
    return pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _vector_cells(column: pa.Array) -> list[Any]:
    rows = len(column)
    items = column.flatten()  # one element per vector, across the batch's rows
    values = items.flatten()  # the numbers, vector after vector
    row_items, item_len = _lengths(column), _lengths(items)
    flat = values.to_numpy(zero_copy_only=False)  # zero-copy unless there are nulls
    item_row = np.repeat(np.arange(rows), row_items)  # the row of each vector
    item_start = np.concatenate(([0], np.cumsum(item_len)))  # where each vector starts in flat
    row_first = np.concatenate(([0], np.cumsum(row_items)))[:-1]  # each row's first vector
    dim = item_len[np.minimum(row_first, len(item_len) - 1)] if len(item_len) else np.zeros(rows, np.int64)
    bad = (item_len == 0) | (item_len != dim[item_row])  # empty, or not the length of the row's first vector
    if items.null_count:
        bad |= items.is_null().to_numpy(zero_copy_only=False)
    if values.null_count:
        value_item = np.repeat(np.arange(len(item_len)), item_len)
        bad |= np.bincount(value_item[values.is_null().to_numpy(zero_copy_only=False)], minlength=len(item_len)) > 0
    bad_row = np.bincount(item_row[bad], minlength=rows) > 0
    null_row = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else np.zeros(rows, bool)
    cells: list[Any] = []
    for r in range(rows):
        if null_row[r]:
            cells.append(None)
        elif bad_row[r] or not row_items[r]:
            cells.append(column[r].as_py())  # parse_row names what is wrong with it
        else:
            start, n, d = item_start[row_first[r]], row_items[r], dim[r]
            cells.append(flat[start:start + n * d].reshape(n, d))
    return cells
