"""What `nextpara serve` builds before it serves the default data dir: the built-in corpus into a store that holds
nothing else, never into a store of the user's own, never from a read-only server."""

import functools
import json
import logging

import pytest
from nextpara.attention_core.bootstrap import ensure_default_store, first_foreign_document
from nextpara.store.builtin_corpus import builtin_documents
from nextpara.store.data_dir import DataDir
from nextpara.store.ingest import build
from nextpara.store.store import open_store


@pytest.fixture
def default_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXTPARA_DATA_DIR", str(tmp_path / "default"))
    return DataDir.default()


def write_corpus(path, docs) -> str:
    path.write_text("".join(json.dumps({"doc_id": d["doc_id"], "paragraphs": d["paragraphs"]}) + "\n" for d in docs))
    return str(path)


@functools.cache
def builtin_sample(n: int) -> list[dict]:
    return [{"doc_id": d.doc_id, "paragraphs": d.paragraphs[:3]} for _, d in zip(range(n), builtin_documents())]


def test_a_default_store_of_the_users_own_is_served_as_it_is(default_dir, tmp_path, caplog):
    mine = {"doc_id": "my-notes", "paragraphs": ["A paragraph of my own.", "And the one after it."]}
    build(write_corpus(tmp_path / "mine.jsonl", [*builtin_sample(2), mine]), default_dir, quiet=True)
    assert first_foreign_document(default_dir) == "my-notes"
    with caplog.at_level(logging.INFO, logger="nextpara.attention_core.bootstrap"):
        ensure_default_store(default_dir, quiet=True)
    with open_store(default_dir, readonly=True) as store:
        assert [d.doc_id for d in store.list_documents(limit=10)] == sorted(
            [*(d["doc_id"] for d in builtin_sample(2)), "my-notes"])  # nothing added, nothing changed
    assert "holds documents of its own (my-notes among them): served as it is" in caplog.text


def test_a_store_of_built_in_documents_alone_is_the_corpus_to_complete(default_dir, tmp_path):
    build(write_corpus(tmp_path / "part.jsonl", builtin_sample(3)), default_dir, quiet=True)  # as a stopped first run
    assert first_foreign_document(default_dir) is None  # so serve's build would complete it


def test_a_read_only_server_and_another_data_dir_build_nothing(default_dir, tmp_path):
    ensure_default_store(default_dir, quiet=True, read_only=True)
    assert not default_dir.path.exists()
    other = DataDir(tmp_path / "other")
    ensure_default_store(other, quiet=True)
    assert not other.path.exists()
