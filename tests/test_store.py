"""The store: round trips, search against brute force for every index type, upsert/delete, refusals."""

import json
import logging
import os

import numpy as np
import pytest
from conftest import unit_vectors
from nextpara.errors import (
    FailedPreconditionError,
    InvalidInputError,
    NotFoundError,
    StoreLockedError,
    StoreMismatchError,
)
from nextpara.store.corpus import Document
from nextpara.store.store import open_store

DIM = 32
INDEX_TYPES = ["flat", "hnsw", "ivf", "auto"]


def make_docs(n_docs, n_par, seed=0, dim=DIM, prefix="d"):
    vecs = unit_vectors(n_docs * n_par, dim, seed, clusters=20)
    docs = [Document(doc_id=f"{prefix}{i}", title=f"T{i}", paragraphs=[f"{prefix}{i} paragraph {j} seed {seed}" for j in range(n_par)])
            for i in range(n_docs)]
    return docs, [vecs[i * n_par:(i + 1) * n_par] for i in range(n_docs)]


def new_store(path, index="flat", dim=DIM):
    return open_store(path, embedder_name="test-embedder", dim=dim, index=index)


def test_round_trip_and_reload(tmp_path):
    docs, vecs = make_docs(5, 4)
    with new_store(tmp_path) as store:
        result = store.add_documents(docs, vecs)
        assert (result.added, result.paragraphs) == (5, 20)
        paras = store.get_paragraphs([3, 1])
        assert [(p.doc_id, p.position) for p in paras] == [("d0", 2), ("d0", 0)]
        store.snapshot()
    with open_store(tmp_path, readonly=True) as store:
        assert store.count_documents() == 5 and store.count_paragraphs() == 20
        assert store.get_paragraphs([20])[0].text == "d4 paragraph 3 seed 0"
        np.testing.assert_allclose(store.vectors([1, 20]), np.stack([vecs[0][0], vecs[4][3]]), atol=1e-6)
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        assert manifest["counts"] == {"documents": 5, "paragraphs": 20}
        assert manifest["embedder"] == {"name": "test-embedder", "spec": "test-embedder", "dim": DIM}


def brute_force(vectors, ids, queries, k, exclude):
    scores = queries @ vectors.T
    scores[:, np.isin(ids, list(exclude))] = -np.inf
    return ids[np.argsort(-scores, axis=1, kind="stable")[:, :k]]


@pytest.mark.parametrize("index", INDEX_TYPES)
def test_search_matches_brute_force(tmp_path, index):
    docs, vecs = make_docs(200, 20, seed=1)  # 4,000 vectors
    queries = unit_vectors(50, DIM, seed=2, clusters=20)
    exclude = set(range(1, 4001, 7))
    with new_store(tmp_path, index=index) as store:
        store.add_documents(docs, vecs)
        store.snapshot()
    for readonly in (False, True):  # in memory as built, and loaded from the snapshot
        with open_store(tmp_path, readonly=readonly) as store:
            all_ids = np.arange(1, 4001)
            expected = brute_force(np.concatenate(vecs), all_ids, queries, 10, exclude)
            scores, got = store.search(queries, 10, [exclude] * len(queries))
            assert not np.isin(got, list(exclude)).any()
            assert (np.diff(scores, axis=1) <= 1e-6).all()
            if index in ("flat", "auto"):
                np.testing.assert_array_equal(got, expected)
            else:
                recall = np.mean([len(set(g) & set(e)) / 10 for g, e in zip(got, expected)])
                assert recall >= 0.9, f"{index} recall@10 {recall:.3f}"


@pytest.mark.parametrize("factory", ["IVF4096,Flat", "PQ8"])
def test_a_factory_string_faiss_cannot_use_yet_is_searched_exactly(tmp_path, factory, caplog):
    """IVF4096 on 4,000 vectors (too few to train it): k-means failed inside the snapshot, and the store could not be
    opened again; PQ8 (FAISS's IndexPQ searches with no id filter): every search crashed. Both are searched exactly."""
    docs, vecs = make_docs(200, 20, seed=1)
    queries = unit_vectors(5, DIM, seed=2, clusters=20)
    expected = brute_force(np.concatenate(vecs), np.arange(1, 4001), queries, 10, set())
    with new_store(tmp_path, index=factory) as store:
        store.add_documents(docs, vecs)
        store.snapshot()
        np.testing.assert_array_equal(store.search(queries, 10, [set()] * len(queries))[1], expected)
    with open_store(tmp_path, readonly=True) as store:
        if factory.startswith("IVF"):
            assert store.info()["index"]["params"]["nlist"] == 4096 and not store.vector_table.index.is_trained
        np.testing.assert_array_equal(store.search(queries, 10, [set()] * len(queries))[1], expected)
    if factory == "PQ8":
        assert "FAISS cannot search index 'IDMap2,PQ8' with id filters" in caplog.text


@pytest.mark.parametrize("index", INDEX_TYPES)
def test_upsert_and_delete_visible_now_and_after_reload(tmp_path, index):
    docs, vecs = make_docs(100, 10, seed=3)
    with new_store(tmp_path, index=index) as store:
        store.add_documents(docs, vecs)
        store.snapshot()
        target = vecs[7][2]
        assert store.search(target, 1)[1][0, 0] == 73  # d7 paragraph 2
        # upsert d7 with new text and vectors: old ids vanish, new ids appear
        new_doc, new_vecs = make_docs(1, 3, seed=4, prefix="x")
        new_doc[0].doc_id = "d7"
        r = store.add_documents(new_doc, new_vecs)
        assert (r.added, r.replaced) == (0, 1)
        with pytest.raises(NotFoundError):
            store.get_paragraphs([73])
        assert store.search(target, 1)[1][0, 0] != 73
        new_ids = store.search(new_vecs[0], 1)[1][:, 0]
        assert [p.doc_id for p in store.get_paragraphs(new_ids)] == ["d7"] * 3
        assert store.delete_documents(["d8"]) == 10
        assert not np.isin(store.search(vecs[8], 5)[1], np.arange(81, 91)).any()
        # an unchanged upsert changes nothing, not even ids
        gen = store.generation
        assert store.add_documents(docs[:2], vecs[:2]).unchanged == 2 and store.generation == gen
    for snapshot_first in (False, True):
        with open_store(tmp_path) as store:  # replayed from SQLite (no snapshot after the writes), then snapshotted
            assert store.count_paragraphs() == 1000 - 10 - 10 + 3
            assert set(store.search(new_vecs[0], 1)[1][:, 0]) == set(new_ids)
            assert not np.isin(store.search(vecs[8], 5)[1], np.arange(71, 91)).any()
            if snapshot_first:
                store.snapshot()


def test_bad_input_is_refused_and_changes_nothing(tmp_path):
    docs, vecs = make_docs(3, 2)
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
        gen = store.generation
        bad_docs, bad_vecs = make_docs(2, 2, seed=9, prefix="new")
        cases = [
            (bad_docs, [bad_vecs[0], np.ones((2, DIM + 1))], "dimension 33, this store's embedder test-embedder has dimension 32"),
            (bad_docs, [bad_vecs[0], np.full((2, DIM), np.nan)], "NaN"),
            (bad_docs, [bad_vecs[0], np.zeros((2, DIM))], "zero vector"),
            (bad_docs, [bad_vecs[0], bad_vecs[1][:1]], "expected 2 vectors"),
            ([bad_docs[0], bad_docs[0]], bad_vecs, "appears twice"),
            ([Document("e", [])], [np.zeros((0, DIM))], "has no paragraphs"),
        ]
        for d, v, message in cases:
            with pytest.raises(InvalidInputError, match=message):
                store.add_documents(d, v)
        with pytest.raises(NotFoundError, match="unknown doc_id"):
            store.delete_documents(["d0", "missing"])
        with pytest.raises(NotFoundError, match="unknown paragraph id"):
            store.get_paragraphs([1, 999])
        with pytest.raises(InvalidInputError, match="dimension 32"):
            store.search(np.ones(DIM + 2), 3)
        assert store.generation == gen and store.count_documents() == 3 and store.count_paragraphs() == 6


@pytest.mark.parametrize("scale", [1e30, 1e20, 1e-25, 1e-30])
def test_vectors_of_huge_or_tiny_values_keep_their_direction(tmp_path, scale):
    """float32's sum of squares overflows (1e20 at 32-d; 1e18 at 1536-d) or underflows (1e-25): such a vector was stored
    as zeros, or refused as the zero vector, where it has a direction like any other."""
    direction = unit_vectors(1, DIM, seed=3)[0]
    with new_store(tmp_path) as store:
        store.add_documents([Document("big", ["a paragraph of extreme values"])], [(direction * scale)[None, :]])
        stored_id = int(store.paragraph_table()[0][0])
        np.testing.assert_allclose(store.vectors([stored_id])[0], direction, atol=1e-6)
        scores, ids = store.search(direction * scale, 1)
        assert ids[0][0] == stored_id and scores[0][0] == pytest.approx(1.0, abs=1e-5)


def test_exclusion_and_identical_texts(tmp_path):
    docs, vecs = make_docs(4, 3)
    docs[2].paragraphs[1] = docs[0].paragraphs[0]
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
        assert list(store.ids_with_text([docs[0].paragraphs[0]])) == [1, 8]
        scores, ids = store.search(vecs[0][0], 20, [[1, 2]])
        assert list(ids[0, -2:]) == [-1, -1] and 1 not in ids[0] and 2 not in ids[0]


def test_refusals_name_expected_and_actual(tmp_path, caplog):
    docs, vecs = make_docs(2, 2)
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
        with pytest.raises(StoreLockedError, match="being written by another process") as err:
            open_store(tmp_path)
        assert (f"(pid {os.getpid()}): if that is a nextpara server, add documents through it (`nextpara add --address "
                "HOST:PORT FILE.jsonl`; add reads JSON Lines only: a folder or text file is built with the server "
                "stopped), serve a replica beside it (`nextpara serve --read-only`), or stop it first; else "
                "wait for it to finish") in str(err.value)  # what to do
    with pytest.raises(StoreMismatchError, match="built by embedder 'test-embedder' .*not 'other'"):
        open_store(tmp_path, embedder_name="other", dim=DIM)
    with pytest.raises(StoreMismatchError, match="dimension 32, not 64"):
        open_store(tmp_path, embedder_name="test-embedder", dim=64)
    with pytest.raises(FailedPreconditionError, match="no nextpara store"):
        open_store(tmp_path / "empty", readonly=True)
    with pytest.raises(InvalidInputError, match="FAISS cannot build index"):
        open_store(tmp_path / "bad-index", embedder_name="e", dim=DIM, index="NoSuchIndex")
    with new_store(tmp_path / "bad-index") as store:  # the refused one created no store: another index may be built
        assert store.info()["index"]["requested"] == "flat"
    with caplog.at_level(logging.WARNING):  # an existing store keeps its index: said, not silently ignored
        with new_store(tmp_path / "bad-index", index="hnsw") as store:
            assert store.info()["index"]["requested"] == "flat"
    assert "keeps the index it was created with (flat): --index hnsw applies to a new store only" in caplog.text

    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreMismatchError, match="format_version 99; this nextpara reads format 1"):
        open_store(tmp_path, readonly=True)


@pytest.mark.parametrize("damage", ["truncated", "not_sqlite"])
def test_a_damaged_database_file_is_named_not_a_traceback(tmp_path, damage):
    docs, vecs = make_docs(3, 2)
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
    db = tmp_path / "paragraphs.sqlite"
    db.write_bytes(db.read_bytes()[:1000] if damage == "truncated" else b"not a database at all\n" * 100)
    for readonly in (True, False):
        with pytest.raises(FailedPreconditionError, match=r"paragraphs.sqlite cannot be read as a nextpara store \("
                                                          r"(database disk image is malformed|file is not a database)\)"):
            open_store(tmp_path, readonly=readonly)


def test_writes_after_snapshot_survive_without_one(tmp_path):
    """Acknowledged = committed to SQLite; a store closed without snapshot replays them on load."""
    docs, vecs = make_docs(10, 3)
    store = new_store(tmp_path)
    store.add_documents(docs[:5], vecs[:5])
    store.snapshot()
    store.add_documents(docs[5:], vecs[5:])
    store.delete_documents(["d0"])
    store.close()  # no snapshot
    with open_store(tmp_path, readonly=True) as reopened:
        assert reopened.count_paragraphs() == 27 and reopened.snapshot_generation < reopened.generation
        assert reopened.search(vecs[9][2], 1)[1][0, 0] == 30
        assert 1 not in reopened.search(vecs[0][0], 27)[1][0]


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_a_snapshot_keeps_each_vector_once_and_the_log_is_truncated(tmp_path, index):
    """A flat snapshot is its vectors (no index.faiss: the index is built from them on load); HNSW keeps its graph
    file. Either loads with the same answers, and a snapshot leaves SQLite's write-ahead log empty."""
    import faiss

    docs, vecs = make_docs(8, 4)
    queries = np.stack([v[1] for v in vecs])
    with new_store(tmp_path, index=index) as store:
        store.add_documents(docs, vecs)
        store.delete_documents(["d3"])
        before = store.search(queries, 5)
        name = store.snapshot()
        assert (tmp_path / "paragraphs.sqlite-wal").stat().st_size == 0
    assert (tmp_path / name / "index.faiss").exists() == (index != "flat")
    with open_store(tmp_path, readonly=True) as store:
        assert store.snapshot_name == name and store.count_paragraphs() == 28
        after = store.search(queries, 5)
        np.testing.assert_array_equal(after[1], before[1])
        np.testing.assert_allclose(after[0], before[0], rtol=1e-5)
        if index == "flat":  # a store written before this change has the flat index's file too: it is read
            faiss.write_index(store.index.index, str(tmp_path / name / "index.faiss"))
    if index == "flat":
        with open_store(tmp_path, readonly=True) as store:
            assert store.snapshot_name == name and store.index.ntotal == 28
            np.testing.assert_array_equal(store.search(queries, 5)[1], before[1])


def test_info_on_a_replica_whose_snapshot_the_writer_removed(tmp_path):
    """A read-only open keeps serving the snapshot it loaded after its writer wrote a newer one and removed the old
    directory: info() must not fail on the files that went (it did: FileNotFoundError, INTERNAL over gRPC)."""
    docs, vecs = make_docs(6, 3)
    writer = new_store(tmp_path)
    writer.add_documents(docs[:3], vecs[:3])
    first = writer.snapshot()
    with open_store(tmp_path, readonly=True) as replica:
        writer.add_documents(docs[3:], vecs[3:])
        assert writer.snapshot() != first and not (tmp_path / first).exists()
        info = replica.info()
        assert info["paragraphs"] == 9 and info["disk_bytes"] > 0
    writer.close()


def test_a_replica_reading_in_two_threads_sees_every_committed_write(tmp_path):
    """A read on the shared connection that overlapped another thread's statement (a server's warm-up reading texts)
    shared that statement's view of the database, taken before the writer's commit: the replica's GetDocument said
    NOT_FOUND for a document its writer had committed (for each of the 40 here, before every read took the lock)."""
    import threading

    docs, vecs = make_docs(100, 30)
    writer = new_store(tmp_path)
    writer.add_documents(docs, vecs)
    stop = threading.Event()
    with open_store(tmp_path, readonly=True) as replica:
        ids = replica.vector_ids().tolist()

        def read_texts():
            while not stop.is_set():
                replica.find_paragraphs(ids)

        reader = threading.Thread(target=read_texts)
        reader.start()
        try:
            new, new_vecs = make_docs(40, 1, seed=1, prefix="new")
            stale = []
            for doc, vec in zip(new, new_vecs):
                writer.add_documents([doc], [vec])
                try:
                    replica.get_document(doc.doc_id)
                except NotFoundError:
                    stale.append(doc.doc_id)
        finally:
            stop.set()
            reader.join()
    writer.close()
    assert not stale, f"{len(stale)} of 40 committed documents unseen"


class _Payload:
    """Unpickling this would create a marker file: the proof that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("target,index", [("vectors.npy", "flat"), ("ids.npy", "flat"), ("vectors.npy", "hnsw"),
                                          ("index.faiss", "hnsw"), ("index.faiss", "flat")])
def test_a_crafted_or_corrupt_snapshot_is_refused_and_rebuilt_from_sqlite(tmp_path, target, index):
    """A flat snapshot has no index.faiss (its vectors are the index): a file of that name put there is read, and refused."""
    docs, vecs = make_docs(6, 3)
    with new_store(tmp_path / "store", index=index) as store:
        store.add_documents(docs, vecs)
        store.snapshot()
        name = json.loads((tmp_path / "store" / "manifest.json").read_text())["snapshot"]
    path = tmp_path / "store" / name / target
    marker = tmp_path / "code-ran"
    if target.endswith(".npy"):  # a pickled object array, as np.save(allow_pickle=True) writes it
        np.save(path, np.array([_Payload(str(marker))], dtype=object), allow_pickle=True)
    else:
        path.write_bytes(b"not a FAISS index" * 10)
    with open_store(tmp_path / "store", readonly=True) as store:
        assert not marker.exists(), "loading the snapshot ran code"
        assert store.count_paragraphs() == 18 and store.snapshot_generation == -1
        np.testing.assert_allclose(store.vectors([4]), vecs[1][:1], atol=1e-6)
        assert store.search(vecs[5][2], 1)[1][0, 0] == 18


def word_ids(store, word):
    return sorted(r[0] for r in store.tables.db.execute("SELECT rowid FROM paragraph_words WHERE paragraph_words MATCH ?",
                                                       (word,)))


def test_the_word_index_follows_every_write(tmp_path):
    docs, vecs = make_docs(6, 3)
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
        store.add_documents([Document(doc_id="d1", title="T1", paragraphs=["d1 rewritten paragraph", "zebra crossing"])], [vecs[1][:2]])
        store.delete_documents(["d2"])
        assert store.words.agrees_with_paragraphs()
        ids = sorted(int(i) for i in store.paragraph_table()[0])
        zebra = int(store.ids_of_documents(["d1"])[1])
        assert word_ids(store, "paragraph") == [i for i in ids if i != zebra]  # no deleted or replaced paragraph
        assert word_ids(store, "zebra") == [zebra]
        assert word_ids(store, "d2") == []
        # bm25 ranks the paragraph that shares the rare words first; the excluded and the unmatched never come
        assert store.word_search(["zebra crossing ahead", "d4 seed", None], 3, [[], [], []])[0] == word_ids(store, "zebra")
        d4 = store.word_search(["d4 paragraph"], 2, [store.ids_of_documents(["d4"])[:1]])[0]
        assert d4 == [int(i) for i in store.ids_of_documents(["d4"])[1:3]]
        store.tables.db.execute("DELETE FROM paragraph_words WHERE rowid = ?", (ids[0],))  # what a bug would do
        assert not store.words.agrees_with_paragraphs()


def test_a_store_from_before_the_word_index_gets_it_on_open(tmp_path):
    docs, vecs = make_docs(4, 3)
    with new_store(tmp_path) as store:
        store.add_documents(docs, vecs)
        db = store.tables.db  # make it look like a store written before the word index existed
        for name in ("paragraphs_words_insert", "paragraphs_words_delete"):
            db.execute(f"DROP TRIGGER {name}")
        db.execute("DROP TABLE paragraph_words_vocab")
        db.execute("DROP TABLE paragraph_words")
    with open_store(tmp_path, readonly=True) as store:  # a reader cannot add it: no word results, no error
        assert not store.words.available and store.word_search(["d1 paragraph"], 5) == [[]]
    with open_store(tmp_path) as store:  # the first writable open builds it
        assert store.words.available and store.words.agrees_with_paragraphs()
        assert word_ids(store, "d3") == [int(i) for i in store.ids_of_documents(["d3"])]


def test_present_vectors_leaves_out_what_a_writer_deleted(tmp_path):
    """Retrieval reads candidate vectors with present_vectors: a paragraph deleted between the search that found it
    and that read is left out instead of failing the whole request."""
    rng = np.random.default_rng(0)
    store = open_store(tmp_path, embedder_name="random", dim=8)
    store.add_documents([Document(doc_id=d, title="", paragraphs=[f"{d} one", f"{d} two"]) for d in ("a", "b")],
                        [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(2)])
    found = store.ids_of_documents(["a", "b"])
    store.delete_documents(["a"])
    kept, vectors = store.present_vectors(found)
    assert kept.tolist() == store.ids_of_documents(["b"]).tolist() and vectors.shape == (2, 8)
    np.testing.assert_array_equal(vectors, store.vectors(kept))
    assert store.present_vectors([])[1].shape == (0, 8)
    store.close()
