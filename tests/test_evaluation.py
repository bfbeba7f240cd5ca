"""The evaluation protocol's duplicate rules (docs/evaluation.md), on a corpus that repeats paragraphs:
the context's texts and every paragraph with the same text are never results; a result whose text equals
the target's counts as a hit, whichever document it comes from."""

import numpy as np
import pytest
from conftest import vector_store
from nextpara.attention_core.evaluation import Evaluation
from nextpara.attention_core.model import NextParagraphModel
from nextpara.attention_core.model_config import RerankerConfig
from nextpara.attention_core.pipeline import RerankPipeline
from nextpara.attention_core.sequences import ParagraphSequences, split_of
from nextpara.errors import InvalidInputError
from nextpara.store.store import open_store

DIM = 16


def doc_in(split: str, stem: str) -> str:
    return next(f"{stem}-{i}" for i in range(1000) if split_of(f"{stem}-{i}") == split)


@pytest.fixture(scope="module")
def duplicates_store(tmp_path_factory):
    """A test document whose last context paragraph and target are repeated, word for word, in another document.

    The copy of the last context paragraph has the same vector (cosine 1: first for every method, were it not
    excluded); the copy of the target sits next to the context (cosine ~0.99), the target itself far from it."""
    rng = np.random.default_rng(0)
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    base = [unit(rng.standard_normal(DIM)) for _ in range(6)]
    near_last = unit(base[3] + 0.1 * rng.standard_normal(DIM))
    test_texts = [f"context paragraph {i} of the test document" for i in range(4)] + [
        "the target paragraph, repeated elsewhere", "the paragraph after the target"]
    test_vecs = np.stack(base[:4] + [unit(-base[3]), base[5]])
    other_texts = ["an unrelated opening paragraph", test_texts[3], test_texts[4], "an unrelated closing paragraph"]
    other_vecs = np.stack([unit(rng.standard_normal(DIM)), base[3], near_last, unit(rng.standard_normal(DIM))])
    fillers = [(doc_in("train", f"filler{d}"), [f"filler {d} paragraph {p}" for p in range(5)],
                np.stack([unit(rng.standard_normal(DIM)) for _ in range(5)])) for d in range(6)]
    docs = [(doc_in("test", "test-doc"), test_texts, test_vecs), (doc_in("train", "other-doc"), other_texts, other_vecs),
            *fillers]
    return vector_store(tmp_path_factory.mktemp("duplicates"), "dup16", docs), test_texts


def test_duplicates_of_the_context_are_excluded_and_duplicates_of_the_target_are_hits(duplicates_store):
    path, test_texts = duplicates_store
    model = NextParagraphModel(RerankerConfig(embed_dim=DIM, lexical=False)).eval()  # untrained: ranks by cos(last + mean/2)
    with open_store(path, readonly=True) as store:
        seq = ParagraphSequences(store)
        evaluation = Evaluation(store, seq, None, RerankPipeline(model, store, 10), n_queries=100, context_length=4)
        texts = {int(i): p.text for i, p in zip(seq.ids, store.get_paragraphs([int(i) for i in seq.ids]))}
        (query,) = [q for q in evaluation.targets if texts[int(seq.ids[q.target])] == test_texts[4]]
        for method in ("B1", "full"):
            ranked, _ = evaluation.run(method, [query], 4, 4)
            results = [texts[int(i)] for i in ranked[0]]
            assert not set(results) & set(test_texts[:4]), f"{method} returned a context text: {results[:3]}"
            top = int(ranked[0][0])
            assert texts[top] == test_texts[4] and top != int(seq.ids[query.target]), (method, results[:3])
            assert evaluation.ranks(ranked, [query])[0] == 1  # the copy in the other document is a hit at rank 1


def test_paired_gain_is_the_mean_difference_with_an_interval_of_the_difference():
    from nextpara.attention_core.metrics import NO_HIT, paired_gain

    rng = np.random.default_rng(1)
    a = rng.choice([1, 2, 5, 20, NO_HIT], size=400)
    assert paired_gain(a, a) == {"recall@1": 0.0, "recall@1_ci": [0.0, 0.0], "mrr@10": 0.0, "mrr@10_ci": [0.0, 0.0]}
    b = a.copy()
    b[:60] = 1  # 60 queries moved to rank 1; those already there stay
    g = paired_gain(a, b)
    gained = float(np.mean(b == 1) - np.mean(a == 1))
    assert g["recall@1"] == pytest.approx(gained) and gained > 0.05
    lo, hi = g["recall@1_ci"]
    assert 0 < lo < gained < hi  # separate intervals of a and b (about +-0.045 each) would overlap
    assert g["mrr@10"] > 0 and g["mrr@10_ci"][0] > 0
    worse = paired_gain(b, a)
    assert worse["recall@1"] == pytest.approx(-gained) and worse["recall@1_ci"][1] < 0


def test_the_length_ablation_reports_each_step_paired(tmp_path):
    rng = np.random.default_rng(2)
    docs = []
    for d in range(12):  # documents that drift: each paragraph the one before plus noise, so context helps a little
        vecs = np.cumsum(rng.standard_normal((12, DIM)), axis=0)
        docs.append((doc_in("test" if d < 4 else "train", f"drift{d}"), [f"drift {d} paragraph {p}" for p in range(12)],
                     vecs / np.linalg.norm(vecs, axis=1, keepdims=True)))
    path = vector_store(tmp_path, "drift16", docs)
    model = NextParagraphModel(RerankerConfig(embed_dim=DIM, lexical=False)).eval()
    with open_store(path, readonly=True) as store:
        result = Evaluation(store, ParagraphSequences(store), None, RerankPipeline(model, store, 10),
                            n_queries=100).evaluate(latency_queries=1)
    from nextpara.attention_core.eval_report import markdown_table

    for by_len in result["context_length"].values():
        lengths = list(by_len)
        assert "change" not in by_len[lengths[0]]
        for a, b in zip(lengths[:-1], lengths[1:]):
            change = by_len[b]["change"]
            assert change["recall@1"] == pytest.approx(by_len[b]["recall@1"] - by_len[a]["recall@1"])
            lo, hi = change["recall@1_ci"]
            assert lo <= change["recall@1"] <= hi
    assert result["context_length"]["B1"]["8"]["change"]["recall@1_ci"] == [0.0, 0.0]  # B1 reads the last alone
    table = markdown_table(result)
    assert "| method | L=1 to 2 | L=2 to 4 | L=4 to 8 |" in table
    assert "Brackets: 95% bootstrap intervals" in table and "B1 by cosine to the last context paragraph" in table


def test_settings_the_protocol_cannot_run_with_are_refused_by_every_caller(duplicates_store):
    """A context length of 0 once read the whole context (``q.context[-0:]``), one above 8 read 8; no queries, or
    none to time, failed inside numpy. The library refuses them as `nextpara eval` does (tests/test_cli.py)."""
    path, _ = duplicates_store
    with open_store(path, readonly=True) as store:
        seq = ParagraphSequences(store)
        for settings, says in (({"context_length": 0}, "between 1 and 8"), ({"context_length": 9}, "got 9"),
                               ({"n_queries": 0}, "queries (--queries) must be at least 1")):
            with pytest.raises(InvalidInputError, match=says.replace("(", r"\(").replace(")", r"\)")):
                Evaluation(store, seq, None, None, **settings)
        ev = Evaluation(store, seq, None, None, context_length=8)
        assert ev.L == 8 and ev.targets
        with pytest.raises(InvalidInputError, match="latency queries"):
            ev.evaluate(latency_queries=0)


def test_each_length_step_says_how_many_queries_read_more(tmp_path):
    """On short documents most targets have few paragraphs before them: at L=8 they read what they read at L=4, and
    the step's change is a mean over every query, most of whom read nothing more. The step says how many did."""
    rng = np.random.default_rng(3)
    docs = []
    for d in range(16):  # 6 paragraphs each: 5 queries per document, holding 1 to 5 context paragraphs
        vecs = rng.standard_normal((6, DIM))
        docs.append((doc_in("test" if d < 4 else "train", f"short{d}"), [f"short {d} paragraph {p}" for p in range(6)],
                     vecs / np.linalg.norm(vecs, axis=1, keepdims=True)))
    path = vector_store(tmp_path, "short16", docs)
    with open_store(path, readonly=True) as store:
        result = Evaluation(store, ParagraphSequences(store), None, None, n_queries=100).evaluate(latency_queries=1)
    from nextpara.attention_core.eval_report import markdown_table

    for by_len in result["context_length"].values():  # 20 queries: 4 hold 1 paragraph, 4 hold 2, ..., 4 hold 5
        assert [by_len[L]["change"]["queries_given_more"] for L in ("2", "4", "8")] == [16, 12, 4]
        assert by_len["8"]["change"]["queries"] == 20
    assert "| queries given more paragraphs | 16 of 20 | 12 of 20 | 4 of 20 |" in markdown_table(result)


def test_contexts_from_stored_vectors_are_not_reported_as_a_missing_embedder(duplicates_store, caplog):
    """The guards of build and train evaluate from the stored vectors on purpose; the log said "no text embedder for
    sentence-transformers/all-MiniLM-L6-v2" after every build, as if the embedder were missing."""
    import logging

    path, _ = duplicates_store
    with open_store(path, readonly=True) as store, caplog.at_level(logging.INFO, "nextpara.attention_core.evaluation"):
        Evaluation(store, ParagraphSequences(store), None, None, n_queries=10, split="test")
    assert "no text embedder" not in caplog.text
    assert "contexts given as their stored vectors (dup16), not embedded again from their texts" in caplog.text


def test_a_model_that_reads_fewer_paragraphs_than_the_longest_length_is_said_to(tmp_path):
    """A model trained with --max-context 4 reads the last 4 at L = 8: its L=8 figures are its L=4 ones, and the
    table, headed L=8, did not say so."""
    rng = np.random.default_rng(4)
    docs = []
    for d in range(12):
        vecs = np.cumsum(rng.standard_normal((12, DIM)), axis=0)
        docs.append((doc_in("test" if d < 4 else "train", f"cap{d}"), [f"cap {d} paragraph {p}" for p in range(12)],
                     vecs / np.linalg.norm(vecs, axis=1, keepdims=True)))
    path = vector_store(tmp_path, "cap16", docs)
    model = NextParagraphModel(RerankerConfig(embed_dim=DIM, lexical=False, max_context=4)).eval()
    with open_store(path, readonly=True) as store:
        result = Evaluation(store, ParagraphSequences(store), None, RerankPipeline(model, store, 10),
                            n_queries=100).evaluate(latency_queries=1)
    from nextpara.attention_core.eval_report import markdown_table

    full = result["context_length"]["full"]
    assert result["model_max_context"] == 4 and full["8"]["mrr@10"] == full["4"]["mrr@10"]
    assert ("The model reads at most 4 context paragraphs (its --max-context): at L = 8 the full pipeline is given "
            "more than it reads") in markdown_table(result)
