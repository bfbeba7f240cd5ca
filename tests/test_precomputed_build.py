"""A build of vectors the user brings (``--embedder precomputed:NAME``): every problem of a document's vectors is a
malformed line, named FILE:LINE before anything is stored (or skipped with --skip-bad), and a refused build creates
no store."""

import json

import numpy as np
import pytest
from conftest import run_cli, unit_vectors
from nextpara.errors import CorpusFormatError, InvalidInputError, Reason
from nextpara.store.corpus import CorpusReader, Document
from nextpara.store.data_dir import DB_FILE
from nextpara.store.ingest import build
from nextpara.store.store import open_store


def write_corpus(path, dims, bad: dict | None = None):
    """One document of two paragraphs per entry of ``dims`` (its vectors' dimension; None: no vectors); ``bad``
    replaces a document's vectors by the given ones (by its index)."""
    with open(path, "w") as f:
        for i, dim in enumerate(dims):
            doc = {"doc_id": f"doc-{i}", "paragraphs": [f"Paragraph {p} of document {i}." for p in range(2)]}
            if dim is not None:
                doc["vectors"] = np.round(unit_vectors(2, dim, seed=i), 6).tolist()
            if i in (bad or {}):
                doc["vectors"] = bad[i]
            f.write(json.dumps(doc) + "\n")
    return path


@pytest.mark.parametrize("vectors, says", [
    ([[0.0] * 8, [1.0] * 8], "vector 0: vector is all zeros"),
    ([[1.0] * 8, [1e39] * 8], "vector 1: a value is beyond float32's range"),  # finite in JSON, not in float32
    ([[1.0] * 8, [10**400] + [1] * 7], "vector 1: a value is too large for a float"),  # (an OverflowError crashed it)
    ([[1.0] * 8, [1.0] * 4], "vector 1: vector of dimension 4, the first has dimension 8"),
])
def test_vectors_the_store_would_refuse_are_a_malformed_line(tmp_path, vectors, says):
    """A zero vector was caught only while storing: no FILE:LINE, the documents of earlier batches committed, and
    --skip-bad could not skip it."""
    corpus = write_corpus(tmp_path / "c.jsonl", [8, 8, 8, 8], bad={2: vectors})
    with pytest.raises(CorpusFormatError) as err:
        build(str(corpus), tmp_path / "store", embedder="precomputed:toy", batch_paragraphs=2, quiet=True)
    assert err.value.line == 3 and says in str(err.value) and str(err.value).startswith(f"{corpus}:3: ")
    assert not (tmp_path / "store" / DB_FILE).exists()  # nothing stored, no store made
    report = build(str(corpus), tmp_path / "store", embedder="precomputed:toy", batch_paragraphs=2, skip_bad=True,
                   quiet=True)
    assert (report.documents_read, report.documents_added, report.documents_skipped_bad) == (3, 3, 1)
    assert says in report.skipped_reasons[0]


def test_mixed_dimensions_and_missing_vectors_name_their_line_and_are_skipped_with_skip_bad(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", [8, 8, 16, None, 8])
    with pytest.raises(InvalidInputError) as err:
        build(str(corpus), tmp_path / "store", embedder="precomputed:toy", quiet=True)
    assert str(err.value).startswith(f"{corpus}:3: document 'doc-2' has vectors of dimension 16; the first document's "
                                     f"({corpus}:1) are of dimension 8")
    assert err.value.reason == Reason.DIMENSION_MISMATCH
    assert not (tmp_path / "store" / DB_FILE).exists()
    report = build(str(corpus), tmp_path / "store", embedder="precomputed:toy", skip_bad=True, quiet=True)
    assert (report.documents_read, report.documents_added, report.documents_skipped_bad) == (3, 3, 2)
    assert report.skipped_reasons[0].startswith(f"{corpus}:3: document 'doc-2' has vectors of dimension 16")
    assert report.skipped_reasons[1] == (f"{corpus}:4: document 'doc-3' has no vectors, and embedder precomputed:toy "
                                         "cannot embed text")
    with open_store(tmp_path / "store", readonly=True) as store:
        assert (store.count_documents(), store.dim) == (3, 8)


def test_an_existing_stores_dimension_is_what_vectors_must_have(tmp_path):
    """Not the first document's: with --skip-bad, an odd first document is skipped, not every other one."""
    build(str(write_corpus(tmp_path / "a.jsonl", [8])), tmp_path / "store", embedder="precomputed:toy", quiet=True)
    corpus = write_corpus(tmp_path / "c.jsonl", [16, 8, 8])
    with pytest.raises(InvalidInputError, match=f"^{corpus}:1: document 'doc-0' has vectors of dimension 16; this "
                                                "store's are of dimension 8$"):
        build(str(corpus), tmp_path / "store", embedder="precomputed:toy", quiet=True)
    report = build(str(corpus), tmp_path / "store", embedder="precomputed:toy", skip_bad=True, quiet=True)
    assert (report.documents_skipped_bad, report.documents_added) == (1, 2)


def test_everything_skipped_is_no_corpus(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", [None, None])
    with pytest.raises(InvalidInputError, match=r"holds no documents this build can store \(2 skipped as malformed\)"):
        build(str(corpus), tmp_path / "store", embedder="precomputed:toy", skip_bad=True, quiet=True)
    assert not (tmp_path / "store" / DB_FILE).exists()


def test_vectors_of_another_dimension_than_the_embedders_create_no_store(tmp_path):
    """The user forgot --embedder precomputed:NAME: the refused build made a MiniLM store of nothing, and the right
    build was then refused as another embedder's."""
    corpus = write_corpus(tmp_path / "c.jsonl", [16, 16, 16])
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(tmp_path / "store"), "--no-guard")
    assert r.returncode == 2, r.stderr
    assert (f"{corpus}:1: document 'doc-0' has vectors of dimension 16; embedder sentence-transformers/all-MiniLM-L6-v2 "
            "makes vectors of dimension 384 (vectors of another model: --embedder precomputed:NAME)") in r.stderr
    assert not (tmp_path / "store" / DB_FILE).exists()
    report = build(str(corpus), tmp_path / "store", embedder="precomputed:ada-002", quiet=True)
    assert report.documents_added == 3


def test_a_store_no_write_reached_is_made_anew_for_another_embedder(tmp_path):
    """A first build stopped (or failed) before its first batch committed left a store of nothing pinned to its
    embedder, and every build with another was refused as another embedder's store; one written to stays refused."""
    from nextpara.errors import StoreMismatchError
    from nextpara.store.embedders import MINILM_NAME

    open_store(tmp_path / "store", embedder_name=MINILM_NAME, dim=384, embedder_spec="minilm").close()  # as it is left
    replica = open_store(tmp_path / "store", readonly=True)  # (a read-only open takes no write lock)
    report = build(str(write_corpus(tmp_path / "c.jsonl", [8, 8])), tmp_path / "store", embedder="precomputed:toy",
                   quiet=True)
    assert report.documents_added == 2
    with pytest.raises(StoreMismatchError, match="was made anew .embedder 'toy', dim 8. since this read-only open"):
        replica.catch_up()  # its 384-d vectors would have taken the new store's 8-d rows
    replica.close()
    with open_store(tmp_path / "store", readonly=True) as store:
        assert (store.embedder_name, store.dim, store.count_paragraphs()) == ("toy", 8, 4)
        assert store.search(unit_vectors(1, 8, seed=0), 1)[1][0, 0] >= 0
    with open_store(tmp_path / "store") as store:  # emptied by a write: no longer a store no write reached
        store.delete_documents(["doc-0", "doc-1"])
    with pytest.raises(StoreMismatchError, match="was built by embedder 'toy' .dim 8., not 'other'"):
        build(str(write_corpus(tmp_path / "d.jsonl", [8])), tmp_path / "store", embedder="precomputed:other", quiet=True)


@pytest.mark.parametrize("name", ["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2:int8"])
def test_a_precomputed_store_may_not_claim_minilm_with_another_dimension(tmp_path, name):
    """Text queries of a store named after the bundled MiniLM are embedded by it (384-d): 16-d vectors under its
    name were accepted, and every text search failed."""
    corpus = write_corpus(tmp_path / "c.jsonl", [16, 16])
    with pytest.raises(InvalidInputError) as err:
        build(str(corpus), tmp_path / "store", embedder=f"precomputed:{name}", quiet=True)
    assert f"precomputed:{name} names the bundled MiniLM, whose vectors are of dimension 384" in str(err.value)
    assert "these are of dimension 16" in str(err.value) and "precomputed:NAME" in str(err.value)
    assert not (tmp_path / "store" / DB_FILE).exists()
    write_corpus(tmp_path / "m.jsonl", [384])  # MiniLM's own vectors, brought: its name is theirs
    assert build(str(tmp_path / "m.jsonl"), tmp_path / "m", embedder=f"precomputed:{name}", quiet=True).documents_added == 1


def test_ragged_vectors_of_one_document_are_a_dimension_mismatch(tmp_path):
    """Vectors of different lengths in one document were INVALID_VECTOR ("vector 1 has 16 values, vector 0 has 8");
    the other dimension errors are DIMENSION_MISMATCH, naming the vector that differs from the store's dimension."""
    with open_store(tmp_path / "store", embedder_name="toy", dim=16) as store:
        doc = Document("ragged", ["a", "b", "c"], vectors=[[1.0] * 8, [1.0] * 16, [1.0] * 16])
        with pytest.raises(InvalidInputError) as err:
            store.add_documents([doc], [doc.vectors])
        assert "document 'ragged' vector 0: vector of dimension 8, this store's embedder toy has dimension 16" in str(err.value)
        assert err.value.reason == Reason.DIMENSION_MISMATCH
        assert err.value.metadata == {"expectedDim": "16", "actualDim": "8"}
        assert store.count_documents() == 0


def test_the_reader_refuses_ragged_vectors_by_the_first_ones_dimension(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", [8], bad={0: [[1.0] * 8, [1.0] * 16]})
    with pytest.raises(CorpusFormatError, match=r":1: document 'doc-0' vector 1: vector of dimension 16, the first has "
                                                r"dimension 8"):
        list(CorpusReader(corpus))
