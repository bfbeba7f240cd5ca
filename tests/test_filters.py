"""Labels and retrieval filters in the store: filtered search against brute force for every index type, top_k full
after filtering, the word index restricted the same way, labels stored and upserted, a store from before labels."""

import json
import sqlite3

import numpy as np
import pytest
from conftest import unit_vectors
from nextpara.errors import InvalidInputError
from nextpara.store.corpus import Document
from nextpara.store.filters import RetrievalFilter
from nextpara.store.ingest import build
from nextpara.store.store import open_store
from nextpara.store.vector_table import EXACT_FILTERED_MAX

DIM = 32
N_DOCS, PER_DOC = 400, 40  # 16,000 paragraphs: broad filters allow more than EXACT_FILTERED_MAX, through FAISS
INDEX_TYPES = ["flat", "hnsw", "ivf", "auto"]


def doc_labels(i: int) -> dict:
    return {"tenant": "abcd"[i % 4], **({"wide": "yes"} if i % 5 else {}), **({"lang": "fr"} if i % 7 == 0 else {})}


@pytest.fixture(scope="module", params=INDEX_TYPES)
def labelled_store(request, tmp_path_factory):
    """A store of N_DOCS labelled documents per index type, snapshotted (IVF trained)."""
    path = tmp_path_factory.mktemp(f"filters-{request.param}")
    vecs = unit_vectors(N_DOCS * PER_DOC, DIM, seed=1, clusters=20)
    docs = [Document(f"d{i:03d}", [f"paragraph {j} of d{i:03d}" for j in range(PER_DOC)], labels=doc_labels(i))
            for i in range(N_DOCS)]
    with open_store(path, embedder_name="test-embedder", dim=DIM, index=request.param) as store:
        for s in range(0, N_DOCS, 100):
            store.add_documents(docs[s:s + 100], [vecs[i * PER_DOC:(i + 1) * PER_DOC] for i in range(s, s + 100)])
        store.snapshot()
    return request.param, path


def brute_force(store, f: RetrievalFilter, queries: np.ndarray, k: int, exclude=()) -> np.ndarray:
    """Top-k ids per query by numpy over every stored vector that ``f`` allows, read back from the store."""
    ids, doc_ids, _, _ = store.paragraph_table()
    labels = {d.doc_id: d.labels for d in store.list_documents(limit=10**6)}
    wanted = dict(f.labels)
    ok = np.array([(not f.doc_ids or d in f.doc_ids) and d not in f.exclude_doc_ids and int(i) not in exclude
                   and all(labels[d].get(key) == value for key, value in wanted.items()) for i, d in zip(ids, doc_ids)])
    allowed = ids[ok]
    order = np.argsort(allowed)
    allowed = allowed[order]
    scores = queries @ store.vectors(allowed).T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return allowed[top]


FILTERS = {
    "narrow labels": RetrievalFilter(labels={"tenant": "b", "lang": "fr"}),  # 14 documents: an exact scan
    "labels and lists": RetrievalFilter(labels={"tenant": "a"}, doc_ids=[f"d{i:03d}" for i in range(0, 200, 2)],
                                        exclude_doc_ids=["d000", "d004"]),
    "broad labels": RetrievalFilter(labels={"wide": "yes"}, exclude_doc_ids=["d001", "d002"]),  # 12,720: FAISS selector
    "broad allow-list": RetrievalFilter(doc_ids=[f"d{i:03d}" for i in range(30, 400)]),
    "deny-list only": RetrievalFilter(exclude_doc_ids=[f"d{i:03d}" for i in range(0, 400, 3)]),
}


@pytest.mark.parametrize("name", FILTERS)
def test_filtered_search_equals_brute_force(labelled_store, name):
    index, path = labelled_store
    f, k = FILTERS[name], 20
    queries = unit_vectors(40, DIM, seed=2, clusters=20)
    for readonly in (False, True):  # as built, and loaded from the snapshot
        with open_store(path, readonly=readonly) as store:
            allowed = store.resolve_filter(f)
            expected = brute_force(store, f, queries, k)
            exclude = [allowed.deny] * len(queries) if allowed.allow is None else None
            scores, got = store.search(queries, k, exclude, allowed.allow)
            assert (got >= 0).all(), "top_k must be full: every filter here allows far more than k paragraphs"
            rows = store.find_paragraphs(np.unique(got).tolist())
            docs = {d.doc_id: d.labels for d in store.list_documents(limit=10**6)}
            for i in np.unique(got):
                doc = rows[int(i)].doc_id
                assert (not f.doc_ids or doc in f.doc_ids) and doc not in f.exclude_doc_ids
                assert all(docs[doc].get(key) == value for key, value in f.labels)
            assert (np.diff(scores, axis=1) <= 1e-6).all()
            exact = index in ("flat", "auto") or allowed.allow is not None and len(allowed.allow) <= EXACT_FILTERED_MAX
            if exact:
                np.testing.assert_array_equal(got, expected)
            else:  # an approximate index searched through its id selector
                recall = np.mean([len(set(g) & set(e)) / k for g, e in zip(got, expected)])
                assert recall >= 0.9, f"{index} {name}: recall@{k} {recall:.3f}"


def test_top_k_is_full_after_filtering(labelled_store):
    """A tenant's paragraphs rank low for these queries: cutting an unfiltered top-k would leave almost nothing."""
    index, path = labelled_store
    with open_store(path, readonly=True) as store:
        f = RetrievalFilter(labels={"tenant": "c", "lang": "fr"})  # d014, d042, ...: 14 documents, 560 paragraphs
        allowed = store.resolve_filter(f)
        assert len(allowed.allow) == 14 * PER_DOC
        queries = store.vectors(store.ids_of_documents(["d001", "d003"])[:5])  # paragraphs of other tenants
        _, unfiltered = store.search(queries, 100)
        assert np.isin(unfiltered, allowed.allow).sum() < 100
        scores, got = store.search(queries, 100, None, allowed.allow)
        assert np.isin(got, allowed.allow).all() and np.isfinite(scores).all()
        np.testing.assert_array_equal(got, brute_force(store, f, queries, 100))
        few = store.resolve_filter(RetrievalFilter(doc_ids=["d005", "no-such-doc"]))  # fewer than k: all, then padding
        _, got = store.search(queries, 50, None, few.allow)
        assert sorted(got[0][:PER_DOC].tolist()) == few.allow.tolist() and (got[:, PER_DOC:] == -1).all()
        nothing = store.resolve_filter(RetrievalFilter(labels={"tenant": "z"}))
        assert len(nothing.allow) == 0 and (store.search(queries, 5, None, nothing.allow)[1] == -1).all()


def test_the_word_index_filters_inside_its_query(tmp_path):
    words = ["amber", "basalt", "cobalt", "dolomite"]
    docs = [Document(f"w{i}", [f"{words[i % 4]} stone number {j} of w{i} {'quartz ' * (j % 3)}" for j in range(6)],
                     labels={"tenant": "abcd"[i % 4]}) for i in range(40)]
    vecs = unit_vectors(240, 8, seed=3)
    with open_store(tmp_path, embedder_name="t", dim=8) as store:
        store.add_documents(docs, [vecs[i * 6:(i + 1) * 6] for i in range(40)])
        allowed = store.resolve_filter(RetrievalFilter(labels={"tenant": "b"}))
        everything = store.word_search(["quartz amber basalt"], 240)[0]
        for k in (5, 200):
            got = store.word_search(["quartz amber basalt"], k, None, allowed.allow)[0]
            assert np.isin(got, allowed.allow).all()
            in_order = [i for i in everything if i in set(allowed.allow.tolist())]
            assert len(got) == min(k, len(in_order)) and set(got) <= set(in_order)
            if k >= len(in_order):
                assert set(got) == set(in_order)
        assert store.word_search(["quartz"], 5, None, np.zeros(0, np.int64)) == [[]]


def test_labels_are_stored_replaced_and_deleted_with_their_document(tmp_path):
    vecs = unit_vectors(6, 8, seed=4)
    with open_store(tmp_path, embedder_name="t", dim=8) as store:
        store.add_documents([Document("a", ["one", "two"], labels={"tenant": "acme", "tier": "gold"}),
                             Document("b", ["three"])], [vecs[:2], vecs[2:3]])
        assert store.get_document("a")[0].labels == {"tenant": "acme", "tier": "gold"}
        assert [(d.doc_id, d.labels) for d in store.list_documents()] == [("a", {"tenant": "acme", "tier": "gold"}),
                                                                           ("b", {})]
        ids, generation = store.ids_of_documents(["a"]).tolist(), store.generation
        same = store.add_documents([Document("a", ["one", "two"], labels={"tier": "gold", "tenant": "acme"})], [vecs[:2]])
        assert same.unchanged == 1 and store.generation == generation
        relabelled = store.add_documents([Document("a", ["one", "two"], labels={"tenant": "initech"})], [vecs[:2]])
        assert (relabelled.replaced, relabelled.paragraphs) == (1, 0) and store.generation == generation + 1
        row = store.get_document("a")[0]
        assert row.labels == {"tenant": "initech"} and row.generation == generation + 1
        assert store.ids_of_documents(["a"]).tolist() == ids  # only the labels changed: the paragraphs stay
        assert [d.doc_id for d in store.list_documents(labels={"tenant": "initech"})] == ["a"]
        assert store.list_documents(labels={"tenant": "acme"}) == []
        rewritten = store.add_documents([Document("a", ["one, rewritten"])], [vecs[3:4]])
        assert rewritten.replaced == 1 and store.get_document("a")[0].labels == {}
        store.add_documents([Document("a", ["one"], labels={"tenant": "x"})], [vecs[:1]])
        store.tables.db.execute("DELETE FROM documents WHERE doc_id = 'a'")  # as a nextpara without labels deletes
        assert store.tables.db.execute("SELECT COUNT(*) FROM document_labels").fetchone()[0] == 0
        assert store.tables.labels_of(["a"]) == {}


def test_a_rebuild_upserts_the_labels_of_its_corpus(tmp_path):
    corpus, vecs = tmp_path / "c.jsonl", unit_vectors(3, 8, seed=5).round(6).tolist()
    rows = [{"doc_id": "a", "paragraphs": ["First.", "Second."], "vectors": vecs[:2], "labels": {"tenant": "acme"}},
            {"doc_id": "b", "paragraphs": ["Third."], "vectors": vecs[2:]}]

    def rebuild():
        corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return build(str(corpus), tmp_path / "store", embedder="precomputed:toy", quiet=True)

    rebuild()
    with open_store(tmp_path / "store", readonly=True) as store:
        assert [(d.doc_id, d.labels) for d in store.list_documents()] == [("a", {"tenant": "acme"}), ("b", {})]
    rows[1]["labels"] = {"tenant": "initech"}
    report = rebuild()
    assert (report.documents_unchanged, report.documents_replaced, report.paragraphs_written) == (1, 1, 0)
    with open_store(tmp_path / "store", readonly=True) as store:
        assert store.get_document("b")[0].labels == {"tenant": "initech"}
    rows[0]["labels"] = {"tenant": ""}
    with pytest.raises(InvalidInputError, match=r"c.jsonl:1: document 'a': label 'tenant': its value is empty"):
        rebuild()


def test_a_store_from_before_labels_opens_and_gets_them(tmp_path):
    vecs = unit_vectors(3, 8, seed=8)
    with open_store(tmp_path, embedder_name="t", dim=8) as store:
        store.add_documents([Document("a", ["one", "two"]), Document("b", ["three"])], [vecs[:2], vecs[2:]])
    with sqlite3.connect(tmp_path / "paragraphs.sqlite") as db:  # as an older nextpara made it
        db.execute("DROP TRIGGER documents_labels_delete")
        db.execute("DROP TABLE document_labels")
    with open_store(tmp_path, readonly=True) as store:  # a reader cannot add the table: no labels, no error
        assert [(d.doc_id, d.labels) for d in store.list_documents()] == [("a", {}), ("b", {})]
        assert store.get_document("a")[0].labels == {} and store.list_documents(labels={"tenant": "x"}) == []
        assert len(store.resolve_filter(RetrievalFilter(labels={"tenant": "x"})).allow) == 0
        assert len(store.resolve_filter(RetrievalFilter(doc_ids=["a"])).allow) == 2
    with open_store(tmp_path) as store:  # the first writable open adds it
        assert store.tables.has_labels and store.list_documents()[0].labels == {}
        result = store.add_documents([Document("a", ["one", "two"], labels={"tenant": "acme"})], [vecs[:2]])
        assert result.replaced == 1 and store.get_document("a")[0].labels == {"tenant": "acme"}
    with open_store(tmp_path) as store:  # once: a second open finds it and keeps what it holds
        assert [d.doc_id for d in store.list_documents(labels={"tenant": "acme"})] == ["a"]


@pytest.mark.parametrize("labels, field, reason", [
    ({"": "x"}, 'documents[0].labels[""]', "FIELD_REQUIRED"),
    ({"tenant": " "}, 'documents[0].labels["tenant"]', "FIELD_REQUIRED"),
    ({"k" * 129: "x"}, 'documents[0].labels["' + "k" * 129 + '"]', "OUT_OF_RANGE"),
    ({"tenant": "v" * 1025}, 'documents[0].labels["tenant"]', "OUT_OF_RANGE"),
    ({"tenant": "a\x00b"}, 'documents[0].labels["tenant"]', "INVALID_TEXT"),
    ({"tenant": 3}, 'documents[0].labels["tenant"]', "INVALID_TEXT"),
    ({f"k{i}": "v" for i in range(65)}, "documents[0].labels", "OUT_OF_RANGE"),
])
def test_bad_labels_are_refused_naming_the_label(tmp_path, labels, field, reason):
    with open_store(tmp_path, embedder_name="t", dim=8) as store:
        with pytest.raises(InvalidInputError) as err:
            store.add_documents([Document("a", ["one"], labels=labels, request_path="documents[0]")], [unit_vectors(1, 8)])
        assert (err.value.field, err.value.reason.value) == (field, reason)
        assert store.count_documents() == 0


@pytest.mark.parametrize("kwargs, field, reason", [
    ({"labels": {"tenant": ""}}, 'filter.labels["tenant"]', "FIELD_REQUIRED"),
    ({"labels": {"": "acme"}}, 'filter.labels[""]', "FIELD_REQUIRED"),
    ({"doc_ids": ["a", ""]}, "filter.doc_ids[1]", "FIELD_REQUIRED"),
    ({"exclude_doc_ids": ["x" * 513]}, "filter.exclude_doc_ids[0]", "OUT_OF_RANGE"),
    ({"doc_ids": [f"d{i}" for i in range(10_001)]}, "filter.doc_ids", "OUT_OF_RANGE"),
    ({"min_score": float("nan")}, "filter.min_score", "OUT_OF_RANGE"),
    ({"max_per_document": -1}, "filter.max_per_document", "OUT_OF_RANGE"),
])
def test_bad_filters_are_refused_naming_the_field(kwargs, field, reason):
    with pytest.raises(InvalidInputError) as err:
        RetrievalFilter(**kwargs)
    assert (err.value.field, err.value.reason.value) == (field, reason)


def test_distinct_texts_keeps_each_texts_best_with_the_other_limits():
    docs, scores = ["a", "b", "c", "a", "d", "e"], [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    texts = ["x", "notice", "notice", "y", "notice", "z"]
    assert RetrievalFilter(distinct_texts=True).select(docs, scores, 10, texts) == [0, 1, 3, 5]
    assert RetrievalFilter(distinct_texts=True, max_per_document=1).select(docs, scores, 10, texts) == [0, 1, 5]
    assert RetrievalFilter(distinct_texts=True, min_score=0.55).select(docs, scores, 2, texts) == [0, 1]
    assert RetrievalFilter().select(docs, scores, 10, texts) == list(range(6))
    with pytest.raises(InvalidInputError, match="filter.distinct_texts must be true or false"):
        RetrievalFilter(distinct_texts="yes")


def test_limits_keep_the_best_per_document_above_the_minimum():
    f = RetrievalFilter(min_score=0.5, max_per_document=2)
    docs, scores = ["a", "a", "b", "a", "c", "b", "b", "c"], [0.9, 0.8, 0.8, 0.7, 0.6, 0.55, 0.5, 0.4]
    assert f.select(docs, scores, 10) == [0, 1, 2, 4, 5]
    assert f.select(docs, scores, 3) == [0, 1, 2]
    assert RetrievalFilter(max_per_document=1).select(docs, scores, 10) == [0, 2, 4]
    assert RetrievalFilter(labels={"b": "2", "a": "1"}) == RetrievalFilter(labels={"a": "1", "b": "2"})
    assert hash(RetrievalFilter(doc_ids=["y", "x"])) == hash(RetrievalFilter(doc_ids=("x", "y", "x")))
