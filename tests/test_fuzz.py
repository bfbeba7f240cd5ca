"""Bad input, generated: the service (bench/reliability/fuzz_service.py at a shorter setting), corpus files and
batch rows.

Every generated input must get either a result or the documented refusal: for the parsers an
InvalidInputError naming the place, never another exception.
"""

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nextpara.batch.rows import parse_row
from nextpara.errors import InvalidInputError
from nextpara.store.corpus import CorpusReader

from bench.reliability import fuzz_service

FAST = settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                                 st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                           max_leaves=20)
field_names = st.sampled_from(["doc_id", "title", "paragraphs", "vectors", "text", "id", "context", "candidates", "top_k",
                               "labels"])
objects = st.dictionaries(st.one_of(field_names, st.text(max_size=6)), json_values, max_size=6)
# a line: a JSON object of likely field names, any JSON value, or bytes that may not be JSON or UTF-8
lines = st.one_of(objects.map(lambda o: json.dumps(o).encode()), json_values.map(lambda v: json.dumps(v).encode()),
                  st.binary(max_size=60), st.text(string.printable, max_size=60).map(str.encode))


@FAST
@given(st.lists(lines, min_size=1, max_size=6))
def test_corpus_reader_accepts_or_names_the_bad_line(tmp_path_factory, raw_lines):
    path = tmp_path_factory.mktemp("corpus") / "c.jsonl"
    path.write_bytes(b"\n".join(raw_lines) + b"\n")
    try:
        docs = list(CorpusReader(str(path)))
    except InvalidInputError as e:
        assert str(path) in str(e) or "c.jsonl" in str(e), e
    else:
        for d in docs:
            assert d.doc_id and d.paragraphs and all(p.strip() for p in d.paragraphs)
    skipping = CorpusReader(str(path), skip_bad=True)
    kept = list(skipping)  # with --skip-bad nothing raises: bad documents are counted
    assert skipping.skipped + len(kept) >= 1 or all(not line.strip() for line in raw_lines)


@FAST
@given(lines)
def test_batch_rows_parse_or_carry_an_error(raw):
    row = parse_row(7, raw, default_top_k=10)
    if row.error is None:
        assert row.id is not None and row.context and 1 <= row.top_k
    else:
        assert row.error and row.id is None or isinstance(row.id, (str, int))


@pytest.mark.slow
def test_generated_requests_never_crash_the_server_or_change_the_store_when_refused(server_store):
    result = fuzz_service.run(str(server_store), requests=600, seed=3)
    assert result["server_alive"] and result["server_exit_code"] == 0
    assert result["n_failures"] == 0, result["failures"][:5]
    assert result["requests"] >= 600 and "INTERNAL" not in result["codes"] and "UNKNOWN" not in result["codes"]
    assert result["codes"].get("OK", 0) > 20 and result["codes"].get("INVALID_ARGUMENT", 0) > 100
    assert {"ListDocuments", "GetDocument", "RerankStream", "DeleteDocuments"} <= set(result["by_rpc"])
