"""The word features read the seam: on a synthetic corpus whose next paragraph only the words where two paragraphs
meet give away (bench/quality/seam_synthetic.py: a made-up name introduced by one paragraph's last sentence and
repeated by the next one's first, random common nouns around them), a model with them ranks the next paragraph
first far more often than the same model without them, which has only the paragraph vectors to go by.

The full-size run of the bench script (200 documents) gives 0.58 against 0.09 (bench/README.md, Direction); this
is a smaller one (100 documents, every test query; one run of it, not a record, gave 0.63 against 0.04, B1 0.03),
with bars well inside that: the issue's > 90% is not met, stage 1 being the limit there."""

from __future__ import annotations

import pytest

from bench.quality.seam_synthetic import build_store, train_and_evaluate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seam_store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("seam"), 100)


def _recall_at_1(store, model_cfg: dict) -> tuple[float, float]:
    """(test Recall@1 of the full pipeline, of B1) after training a small model from scratch with ``model_cfg``."""
    methods = train_and_evaluate(store, model_cfg)["methods"]
    return methods["full"]["recall@1"], methods["B1"]["recall@1"]


def test_word_features_find_the_next_paragraph_by_the_words_at_the_seam(seam_store):
    words, b1 = _recall_at_1(seam_store, {})  # the default model: word features on
    vectors, _ = _recall_at_1(seam_store, {"lexical": False})
    assert words >= 0.4, f"with word features, Recall@1 {words:.3f}"
    assert vectors <= 0.2 and b1 <= 0.2, f"without them {vectors:.3f}, B1 {b1:.3f}: the vectors should not tell"
    assert words >= vectors + 0.25, f"with word features {words:.3f}, without {vectors:.3f}"
