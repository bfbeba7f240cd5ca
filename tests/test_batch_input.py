"""rerank-batch input: orjson and json read every line alike; Parquet vector columns reach NumPy through Arrow and
rank like the same rows in JSON Lines."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from conftest import run_cli
from nextpara.batch import rows as rows_module
from nextpara.batch.rows import FIELDS, Row, dumps, parse_row, read_raw
from test_batch import BAD_ROWS, assert_same_output, load, make_input

# lines where orjson alone would read differently, or not at all: json's reading must win
TRICKY = [
    b'{"id": 1180591620717411303424, "context": [1]}',  # an integer beyond 64 bits: orjson makes it a float
    b'{"id": "big", "context": [-9223372036854775809]}',
    b'{"id": "t", "context": [1], "top_k": 18446744073709551616}',
    b'{"id": "nan", "context": [[NaN, 0.5]]}',
    b'{"id": "inf", "context": [[Infinity, 1e999]]}',
    b'{"id": "\\ud800", "context": [1]}',  # a lone surrogate
    b'\xef\xbb\xbf{"id": "bom", "context": [1]}',
    b'{"id": "dup", "id": "dup2", "context": ["x"]}',
    b'{"id": "u", "context": ["caf\xc3\xa9 \\u00e9\\n"]}',
    b'{"id": "deep", "context": [[[[[[1]]]]]]}',
    b'{"id": "f", "context": [{"a": 1180591620717411303424}]}',
    b'\t{"id": "ws", "context": [1]} \r\n',
] + [raw for raw, _ in BAD_ROWS]


def _parse_all(lines):
    return [repr(parse_row(n, raw, 10)) for n, raw in enumerate(lines, 1)]  # repr: NaN equals NaN


def test_orjson_and_json_read_every_line_alike(monkeypatch):
    pytest.importorskip("orjson")
    assert rows_module.orjson is not None, "orjson is installed but batch.rows does not use it"
    with_orjson = _parse_all(TRICKY)
    monkeypatch.setattr(rows_module, "orjson", None)
    assert _parse_all(TRICKY) == with_orjson
    assert "id=1180591620717411303424," in with_orjson[0] and "error=None" in with_orjson[0]
    assert "id='bom'," in with_orjson[6] and "error=None" in with_orjson[6]  # a BOM (an INPUT's first line) is no error


def test_a_text_with_no_utf8_form_is_its_row_s_error():
    """A lone surrogate (a JSON escape decodes to one) made the tokenizer or protobuf raise, ending the job on every
    run; it is the row's error (a row's error is written in its place and the job goes on: test_batch.py)."""
    line = b'{"id": "s", "context": ["fine", "lone \\ud800 surrogate"], "candidates": [1, "x\\udc00"]}'
    row = parse_row(7, line, 10)
    assert row.id == "s" and row.error == ("context[1]: the text holds a lone surrogate ('\\ud800' at character 5), "
                                           "which is not text UTF-8 can carry")
    assert parse_row(8, b'{"id": "t", "context": ["caf\xc3\xa9 \\u00e9"]}', 10).error is None  # escapes of real text


def test_malformed_json_line_names_its_line_with_orjson(tmp_path):
    pytest.importorskip("orjson")
    assert rows_module.orjson is not None
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": "a", "context": [1]}\n\n{"id": "b", "context": [1, 2}\n{"id": "c", "context": [2]}\n'
                    b'{"id": "d" "context": [3]}\n{"id": "e", "context": [4]\n')
    parsed = [parse_row(n, raw, 10) for n, raw in read_raw(src)]
    assert [(r.line, r.error) for r in parsed] == [
        (1, None), (3, "malformed JSON: Expecting ',' delimiter at column 29"), (4, None),
        (5, "malformed JSON: Expecting ',' delimiter at column 12"),
        (6, "malformed JSON: Expecting ',' delimiter at column 27")]  # a row cut short: its end (it said column 1)


def test_output_lines_mean_the_same_with_either_writer(monkeypatch):
    outs = [{"id": "q1", "results": [{"candidate": 2, "score": 0.125, "paragraph_id": 7}], "context_dropped": 3},
            {"id": 1180591620717411303424, "results": [{"paragraph_id": 1, "doc_id": "d\u00e9", "position": 0,
                                                        "score": -1e-7, "retrieval_score": 0.5, "text": "a\nb \u2028"}]},
            {"id": None, "line": 4, "error": "malformed JSON: Expecting value at column 1"}]
    fast = [dumps(o) for o in outs]
    monkeypatch.setattr(rows_module, "orjson", None)
    slow = [dumps(o) for o in outs]
    for a, b, o in zip(fast, slow, outs):
        assert a.endswith(b"\n") and a.count(b"\n") == 1 and b.endswith(b"\n")
        assert json.loads(a) == json.loads(b) == o
    nan = {"id": "n", "results": [{"candidate": 0, "score": float("nan")}]}
    with pytest.raises(ValueError):
        dumps(nan)
    monkeypatch.undo()
    with pytest.raises(ValueError):  # orjson would write null: the job refuses alike
        dumps(nan)


def test_ray_rows_carry_parquet_vectors_exactly():
    from nextpara.batch.engines import row_json

    vectors = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    row = Row(line=2, id="v", context=vectors, candidates=[4, 5], top_k=3)
    back = Row(**json.loads(row_json(row)))
    assert np.array_equal(np.asarray(back.context, np.float32), vectors) and back.candidates == [4, 5]
    vectors[1, 2] = np.nan  # kept as NaN (orjson would write null), so the scorer names it
    back = Row(**json.loads(row_json(Row(line=2, id=2**70, context=vectors))))
    assert np.isnan(back.context[1][2]) and back.id == 2**70


# ---- Parquet -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(trained_store):
    from nextpara.batch.engines import InProcessEngine

    engine = InProcessEngine(trained_store, chunk_rows=16)
    yield engine
    engine.close()


def _run(engine, src, out):
    from nextpara.batch.job import run_job

    run_job(src, out, engine, quiet=True)
    return load(out)


def _vector_rows(trained_store, tmp_path):
    rows = [r for r in make_input(trained_store, tmp_path / "all.jsonl", n=64, seed=1) if isinstance(r["context"][0], list)]
    nan = json.loads(json.dumps(rows[0]))
    nan["id"], nan["candidates"][3][7] = "nan", float("nan")
    return rows + [nan]  # 16 rows of vectors (top_k 4), one with a NaN


def _same_as_jsonl(engine, tmp_path, rows, table, name):
    import pyarrow.parquet as pq

    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(table, tmp_path / f"{name}.parquet", row_group_size=5)
    expected = _run(engine, tmp_path / f"{name}.jsonl", tmp_path / f"{name}-jsonl.out")
    got = _run(engine, tmp_path / f"{name}.parquet", tmp_path / f"{name}-parquet.out")
    assert_same_output(expected, got)
    return expected, got


def test_parquet_fixed_size_float32_vectors_rank_like_jsonl(trained_store, engine, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    from nextpara.batch import parquet_rows

    monkeypatch.setattr(parquet_rows, "BATCH_ROWS", 6)  # rows across record batches, cells at offsets in each
    rows = _vector_rows(trained_store, tmp_path)
    dim = len(rows[0]["context"][0])
    vectors = pa.list_(pa.list_(pa.float32(), dim))
    schema = pa.schema([("id", pa.string()), ("context", vectors), ("candidates", vectors), ("top_k", pa.int64())])
    table = pa.Table.from_pylist(rows, schema=schema)
    first = next(parquet_rows.read_parquet(_write(table, tmp_path / "probe.parquet"), FIELDS))[1]
    assert isinstance(first["context"], np.ndarray) and first["context"].dtype == np.float32  # not Python floats
    expected, got = _same_as_jsonl(engine, tmp_path, rows, table, "fixed")
    assert sum("results" in o for o in got) == 16 and "vector has a NaN" in got[-1]["error"]
    assert all(len(o["results"]) == 4 for o in got[:16])

    # vectors of another dimension: every row is reported, the job goes on
    short = [dict(r, context=[v[:3] for v in r["context"]], candidates=[v[:3] for v in r["candidates"]]) for r in rows]
    vectors = pa.list_(pa.list_(pa.float32(), 3))
    table = pa.Table.from_pylist(short, schema=pa.schema([("id", pa.string()), ("context", vectors),
                                                          ("candidates", vectors), ("top_k", pa.int64())]))
    expected, got = _same_as_jsonl(engine, tmp_path, short, table, "short")
    assert all("context[0]: vector of dimension 3" in o["error"] for o in got)


def test_parquet_variable_list_vectors_rank_like_jsonl(trained_store, engine, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    from nextpara.batch import parquet_rows

    monkeypatch.setattr(parquet_rows, "BATCH_ROWS", 7)
    rows = _vector_rows(trained_store, tmp_path)
    ragged = json.loads(json.dumps(rows[1]))
    ragged["id"], ragged["candidates"][2] = "ragged", ragged["candidates"][2][:5]
    null = json.loads(json.dumps(rows[2]))
    null["id"], null["context"][1][4] = "null", None
    empty = json.loads(json.dumps(rows[3]))
    empty["id"], empty["candidates"][0] = "empty", []
    small = json.loads(json.dumps(rows[4]))
    small["id"], small["context"] = "small", [[0.5, 0.5], [1.0, 0.0]]
    rows = rows[:5] + [ragged, null, empty, small] + rows[5:]
    table = pa.Table.from_pylist(rows)  # list<list<double>>
    assert str(table.schema.field("context").type) == "list<item: list<item: double>>"
    expected, got = _same_as_jsonl(engine, tmp_path, rows, table, "variable")
    errors = {o["id"]: o.get("error") for o in got}
    assert errors["ragged"] == expected[5]["error"] and "candidates[2]: vector of dimension 5" in errors["ragged"]
    assert errors["null"] == "context[1]: a vector must be a non-empty list of numbers"
    assert errors["empty"] == "candidates[0]: a vector must be a non-empty list of numbers"
    assert "context[0]: vector of dimension 2" in errors["small"]
    assert sum(e is None for e in errors.values()) == 16


def test_parquet_texts_and_ids_rank_like_jsonl(trained_store, engine, tmp_path):
    pa = pytest.importorskip("pyarrow")

    made = make_input(trained_store, tmp_path / "all.jsonl", n=40, seed=2)
    texts = [r for r in made if isinstance(r["context"][0], str)]  # text contexts ...
    ids = [r["candidates"] for r in made if isinstance(r["id"], int)]  # ... and stored-id candidates
    rows = [dict(r, candidates=c, top_k=5) for r, c in zip(texts, ids)]
    _same_as_jsonl(engine, tmp_path, rows, pa.Table.from_pylist(rows), "texts")


def _write(table, path):
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    return path


def test_vectors_become_the_arrays_the_scorer_would_make():
    from nextpara.batch.scoring import vectors_as_arrays
    from nextpara.store.unit_vectors import unit_rows

    lists = [[0.1, -2.0, 3], [1e-3, 0.5, 7.25]]
    row = vectors_as_arrays(Row(line=1, id="v", context=lists, candidates=[[1, 2, 3]]))
    assert row.context.dtype == np.float32 and row.context.shape == (2, 3)
    np.testing.assert_array_equal(unit_rows(row.context, 3), unit_rows(lists, 3))  # the same numbers, bit for bit
    assert row.candidates.shape == (1, 3)
    mixed = ["a text", 7, [0.5, 0.5]]
    ragged = [[1.0, 2.0], [1.0]]
    kept = vectors_as_arrays(Row(line=2, id="m", context=mixed, candidates=ragged))
    assert kept.context is mixed and kept.candidates is ragged  # the scorer takes or names these as before
    huge = [[10**400, 1.0]]  # beyond float64: left to the scorer
    assert vectors_as_arrays(Row(line=3, id="h", context=huge)).context is huge
    bad = Row(line=4, id="b", context=[[1.0]], error="missing context")
    assert vectors_as_arrays(bad).context == [[1.0]]  # an error row is written as it is, not converted


def test_vector_rows_made_arrays_score_as_the_rows_as_given(trained_store, engine, tmp_path):
    """The in-process engine makes vector lists arrays as it reads: the same outputs, and the same messages for bad
    vectors and for contexts longer than the model reads, as scoring the rows as parsed."""
    from nextpara.batch.scoring import score_rows, vectors_as_arrays

    made = make_input(trained_store, tmp_path / "all.jsonl", n=24, seed=4)
    rows = [r for r in made if isinstance(r["context"][0], list)]
    good = rows[0]
    dim = len(good["context"][0])
    reads = engine.predictor.pipeline.max_context
    long = dict(good, id="long", context=(good["context"] * (reads + 4))[:reads + 4])  # the model reads its last ones
    nan = dict(good, id="nan", candidates=good["candidates"][:3] + [[float("nan")] * dim])
    short = dict(good, id="short", context=[[0.5] * (dim - 1)])
    predict = {"id": "predict", "context": good["context"][:4], "top_k": 3}  # no candidates: retrieval
    rows += [long, nan, short, predict]
    path = tmp_path / "vectors.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def parsed():
        return [parse_row(n, raw, 10) for n, raw in read_raw(path)]

    assert all(isinstance(vectors_as_arrays(r).context, np.ndarray) for r in parsed())  # the engine scores arrays ...
    got = [o for chunk in engine.run(iter(parsed())) for o in chunk]
    as_given = score_rows(engine.predictor, parsed())  # ... and these the lists as parsed
    assert len(got) == len(rows) == 10
    assert_same_output(json.loads(json.dumps(as_given)), json.loads(json.dumps(got)))
    by_id = {o["id"]: o for o in got}
    assert by_id["long"]["context_dropped"] == 4
    assert "vector has a NaN or infinite value" in by_id["nan"]["error"]
    assert "vector of dimension" in by_id["short"]["error"]
    assert len(by_id["predict"]["results"]) == 3


@pytest.mark.parametrize("content", [b"", b"x\n", b"PAR1 and then not Parquet at all PAR1"])
def test_a_file_named_parquet_that_is_not_one_stops_the_job_at_once(tmp_path, content):
    """pyarrow's ArrowInvalid was a traceback."""
    pytest.importorskip("pyarrow")
    from nextpara.batch.rows import RowError, count_rows

    path = tmp_path / "in.parquet"
    path.write_bytes(content)
    with pytest.raises(RowError, match=r"in.parquet: not a Parquet file pyarrow can read \(.+\)"):
        count_rows(path)


def test_a_parquet_column_that_is_no_field_is_the_files_error(tmp_path):
    """Each row got "unknown field 'extra'" and the job exited 0."""
    pa = pytest.importorskip("pyarrow")
    from nextpara.batch.rows import count_rows, read_raw
    from nextpara.errors import InvalidInputError

    path = _write(pa.table({"id": ["a", "b"], "context": [[1], [2]], "extra": [1, 2], "note": ["x", "y"]}),
                  tmp_path / "in.parquet")
    for read in (count_rows, lambda p: list(read_raw(p))):
        with pytest.raises(InvalidInputError, match=r"in.parquet: unknown columns 'extra', 'note' \(a row has id, "
                                                    r"context, candidates, top_k\)"):
            read(path)


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    """pyarrow comes with nextpara[ray]: a [server] install given Parquet is told what is missing, when the job counts
    its rows (the first thing it does) and when it reads them, never with a traceback."""
    from nextpara.batch.rows import RowError, count_rows

    path = tmp_path / "in.parquet"
    path.write_bytes(b"PAR1")
    for name in ("pyarrow", "pyarrow.parquet", "nextpara.batch.parquet_rows"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: import raises
    with pytest.raises(RowError, match=r"in.parquet: reading Parquet needs pyarrow \(pip install pyarrow\)"):
        count_rows(path)
    with pytest.raises(RowError, match="reading Parquet needs pyarrow"):
        list(read_raw(path))


def test_the_job_file_keeps_the_index_generation_of_the_first_rows(tmp_path):
    """The generation OUTPUT's first rows were ranked at: the one of the run that writes the first row (an OUTPUT
    begun and left empty takes the next run's), kept across resumes at others (``index_then``: the job warns), and
    unknown (null) for rows of a job file from before it was kept, which no resume then warns about."""
    from nextpara.batch.output import ResumableOutput

    out, job, settings = tmp_path / "out.jsonl", tmp_path / "out.jsonl.job.json", {"top_k": 10}
    ResumableOutput(out, settings, index_version=3).close()  # begun, stopped before its first row
    o = ResumableOutput(out, settings, index_version=5)
    assert o.index_then is None and json.loads(job.read_text())["index_version"] == 5
    o.append([b'{"id": 1, "results": []}\n'])
    o.close()
    o = ResumableOutput(out, settings, index_version=7)
    o.close()
    assert o.index_then == 5 and json.loads(job.read_text())["index_version"] == 5
    older = json.loads(job.read_text())
    del older["index_version"]
    job.write_text(json.dumps(older))
    for _ in range(2):
        o = ResumableOutput(out, settings, index_version=7)
        o.close()
        assert o.index_then is None and json.loads(job.read_text())["index_version"] is None


def test_an_input_of_no_rows_is_said_to_hold_none(trained_store, tmp_path):
    """An empty or blank INPUT (a wrong file, an export that failed) wrote 0 rows with exit status 0 and the usual
    summary line, nothing telling it from a job that had work."""
    for name, content in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
        (tmp_path / name).write_text(content)
        r = run_cli("rerank-batch", str(tmp_path / name), str(tmp_path / f"{name}.out"), "--data-dir", str(trained_store))
        assert r.returncode == 0 and f"{tmp_path / name} holds no rows" in r.stderr, r.stderr
        assert "0 rows written" in r.stdout
    done = tmp_path / "one.jsonl"  # a rerun with every row already in OUTPUT ranks nothing too, and says that instead
    done.write_text(json.dumps({"id": "a", "context": ["Some text."]}) + "\n")
    for expected in ("1 rows written", "1 already in OUTPUT skipped"):
        r = run_cli("rerank-batch", str(done), str(tmp_path / "one.out"), "--data-dir", str(trained_store))
        assert r.returncode == 0 and expected in r.stdout and "holds no rows" not in r.stderr, r.stderr
