"""The model reads the seam: on a synthetic corpus whose next paragraph only the words where two paragraphs meet give
away (bench/quality/seam_synthetic.py: a made-up name introduced by one paragraph's last sentence and repeated by the
next one's first, random common nouns around them), a model with word features ranks the next paragraph first far
more often than the same model without them, which has only the paragraph vectors to go by; and the seam reader
(the seam feature and the word index searched by the last sentence: `nextpara train --seam 20`) ranks it first for
more than 90% of queries, which the default model, whose candidates often lack the target, does not.

The full-size run of the bench script (200 documents) is in bench/quality/README.md, Direction; this is a smaller one
(100 documents, every test query; one run of it, not a record, gave 0.63 with word features against 0.04 without, B1
0.03, and 1.00 with the seam reader), with bars well inside those."""

from __future__ import annotations

import pytest

from bench.quality.seam_synthetic import build_store, train_and_evaluate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seam_store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("seam"), 100)


_RESULTS: dict = {}


def _recall_at_1(store, model_cfg: dict) -> tuple[float, float]:
    """(test Recall@1 of the full pipeline, of B1) after training a small model from scratch with ``model_cfg`` (once
    per configuration and store: the tests below share the default model's)."""
    key = (str(store), tuple(sorted(model_cfg.items())))
    if key not in _RESULTS:
        methods = train_and_evaluate(store, model_cfg)["methods"]
        _RESULTS[key] = methods["full"]["recall@1"], methods["B1"]["recall@1"]
    return _RESULTS[key]


def test_word_features_find_the_next_paragraph_by_the_words_at_the_seam(seam_store):
    words, b1 = _recall_at_1(seam_store, {})  # the default model: word features on
    vectors, _ = _recall_at_1(seam_store, {"lexical": False})
    assert words >= 0.4, f"with word features, Recall@1 {words:.3f}"
    assert vectors <= 0.2 and b1 <= 0.2, f"without them {vectors:.3f}, B1 {b1:.3f}: the vectors should not tell"
    assert words >= vectors + 0.25, f"with word features {words:.3f}, without {vectors:.3f}"


def test_the_seam_reader_ranks_the_next_paragraph_first_for_nine_queries_in_ten(seam_store):
    seam, _ = _recall_at_1(seam_store, {"seam_feature": True, "seam_candidates": 20})
    words, _ = _recall_at_1(seam_store, {})
    assert seam > 0.9, f"with the seam reader, Recall@1 {seam:.3f}"
    assert words < 0.9, f"the default model {words:.3f}: it should not need the seam reader here"
