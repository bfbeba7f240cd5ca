"""The evaluation protocol's duplicate rules (docs/evaluation.md), on a corpus that repeats paragraphs:
the context's texts and every paragraph with the same text are never results; a result whose text equals
the target's counts as a hit, whichever document it comes from."""

import numpy as np
import pytest
from conftest import vector_store
from nextpara.attention_core.evaluation import Evaluation
from nextpara.attention_core.model import NextParagraphModel, RerankerConfig
from nextpara.attention_core.pipeline import RerankPipeline
from nextpara.attention_core.sequences import ParagraphSequences, split_of
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
