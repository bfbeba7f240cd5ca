"""Exact search of a flat index (VectorTable._exact: a torch matrix product and top-k, in blocks of queries) against a
sort of the same scores by NumPy: the same scores in the same order, each the true score of the id it names, with
exclusions and filters respected, whatever the block size; exact ties in id order. (Copies of one vector at
different rows of the product can score a last bit apart, so near ties may come in either order.)"""

from __future__ import annotations

import numpy as np
import pytest
from nextpara.attention_core.candidates import first_seen
from nextpara.store import vector_table
from nextpara.store.vector_index import VectorIndex, choose_index
from nextpara.store.vector_table import VectorTable


def table(vectors: np.ndarray, ids: np.ndarray) -> VectorTable:
    index = VectorIndex(choose_index("flat", len(ids)), vectors.shape[1])
    index.add(vectors, ids)
    return VectorTable(vectors.shape[1], "flat", index, ids, vectors)


def check(t, vectors, ids, queries, k, exclude=(), allow=None):
    ok = ~np.isin(ids, list(exclude)) & (np.isin(ids, allow) if allow is not None else True)
    scores = queries @ vectors[ok].T
    want = -np.sort(-scores, axis=1)[:, :k]
    got_s, got = t.search(queries, k, np.asarray(exclude, np.int64), allow=allow)
    n = want.shape[1]
    np.testing.assert_allclose(got_s[:, :n], want, atol=1e-6)
    assert (got[:, n:] == -1).all() and np.isneginf(got_s[:, n:]).all()
    assert np.isin(got[:, :n], ids[ok]).all()  # never an excluded id or one the filter leaves out
    true = (queries[:, None, :] * vectors[np.searchsorted(ids, got[:, :n])]).sum(-1)
    np.testing.assert_allclose(got_s[:, :n], true, atol=1e-6)  # each score is its id's


@pytest.mark.parametrize("scan_scores", [1 << 24, 50])  # one block, and blocks of a query or two
def test_exact_search_matches_a_stable_sort(monkeypatch, scan_scores):
    monkeypatch.setattr(vector_table, "SCAN_SCORES", scan_scores)
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 8)).astype(np.float32)
    vectors = np.concatenate([base, base[:10], base[:10]])  # thirty paragraphs share ten vectors: ties
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(100, 100 + 3 * len(vectors), 3)  # ascending, not contiguous
    t = table(vectors, ids)
    queries = np.concatenate([vectors[:5], rng.standard_normal((5, 8)).astype(np.float32)])
    exclude = ids[[0, 41, 7]]
    for k in (1, 3, 25, 59, 75):
        check(t, vectors, ids, queries, k, exclude)
        check(t, vectors, ids, queries, k, exclude, allow=ids[::2])


def test_the_lowest_ids_win_a_tie_for_the_last_place():
    vectors = np.tile(np.array([[1.0, 0.0, 0.0]], np.float32), (7, 1))
    t = table(vectors, np.arange(2, 9))
    assert t.search(vectors[:1], 3, np.array([], np.int64))[1].tolist() == [[2, 3, 4]]
    assert t.search(vectors[:1], 3, np.array([3]), allow=np.arange(2, 9))[1].tolist() == [[2, 4, 5]]


@pytest.mark.parametrize("scan_scores", [1 << 24, 60])  # one block, and a block per query
@pytest.mark.parametrize("exact_filtered_max", [10_000, 0])  # a filter scanned exactly, or searched by FAISS
@pytest.mark.parametrize("factory", ["flat", "hnsw"])
def test_each_row_has_exclusions_of_its_own(monkeypatch, factory, exact_filtered_max, scan_scores):
    """Row i never gets an id of ``row_exclude[i]`` and still gets its k best in order: the exact scan blocks them in
    its scores (block after block of queries), FAISS (HNSW: exact at this size) searches deeper and each row drops its
    own; with a filter too."""
    monkeypatch.setattr(vector_table, "EXACT_FILTERED_MAX", exact_filtered_max)
    monkeypatch.setattr(vector_table, "SCAN_SCORES", scan_scores)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(10, 70)
    index = VectorIndex(choose_index(factory, len(ids)), 8)
    index.add(vectors, ids)
    t = VectorTable(8, factory, index, ids, vectors)
    queries = vectors[[3, 3, 20, 41]]  # two rows with the same query and different exclusions
    common = np.array([ids[5]])
    rows = [ids[[3, 7, 8]], ids[[9]], np.array([999, ids[20]]), np.zeros(0, np.int64)]  # 999: not stored
    for allow in (None, ids[::2]):
        for k in (1, 5, 40):
            got_s, got = t.search(queries, k, common, allow, rows)
            for q, row_ex, s_row, i_row in zip(queries, rows, got_s, got):
                ok = ~np.isin(ids, np.concatenate([common, row_ex])) & (np.isin(ids, allow) if allow is not None else True)
                order = np.argsort(-(vectors[ok] @ q), kind="stable")[:k]  # no ties in random vectors
                np.testing.assert_allclose(s_row[:len(order)], (vectors[ok] @ q)[order], atol=1e-6)
                assert i_row[:len(order)].tolist() == ids[ok][order].tolist()
                assert (i_row[len(order):] == -1).all()


def test_candidate_lists_keep_each_id_once_where_it_first_came():
    assert first_seen(np.array([7, 3, -1, 7, 9, 3, -1, 1])).tolist() == [7, 3, 9, 1]
    assert first_seen(np.array([-1, -1])).tolist() == [] and first_seen(np.zeros(0, np.int64)).dtype == np.int64


@pytest.mark.parametrize("scan_scores", [1 << 24, 300 * 4, 300 * 16])  # one block; blocks of 4 and of 16 queries
def test_padded_scans_rank_as_unpadded_ones(monkeypatch, scan_scores):
    """The exact scan pads its query rows with zero rows (vector_table.scan_rows: the matrix product is faster at some
    widths; a block is padded where the padded block stays within SCAN_SCORES: a block of fewer queries than the
    others, at the end); the padding's scores never reach a row, and each row's exclusions stay its own, block after
    block."""
    monkeypatch.setattr(vector_table, "SCAN_SCORES", scan_scores)
    assert [vector_table.scan_rows(n) for n in (1, 3, 4, 5, 9, 10, 15, 16, 17, 26, 47, 48)] == [
        4, 4, 4, 5, 9, 16, 16, 16, 17, 32, 48, 48]
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1000, 1300)
    t = table(vectors, ids)
    for n in (1, 2, 3, 5, 11, 13, 47):
        queries = vectors[rng.choice(300, n)]
        rows = [ids[rng.choice(300, 3)] for _ in range(n)]
        found = {}
        for pad in (True, False):
            monkeypatch.setattr(vector_table, "PAD_SCAN_ROWS", pad)
            found[pad] = t.search(queries, 20, np.array([ids[0]]), None, rows)
        assert found[True][1].tolist() == found[False][1].tolist()
        np.testing.assert_allclose(found[True][0], found[False][0], atol=1e-6)
        assert not any(np.isin(got, ex).any() or ids[0] in got for got, ex in zip(found[True][1], rows))
