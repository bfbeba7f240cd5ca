"""What `nextpara serve` builds before it serves the default data dir: the built-in corpus into a store that holds
nothing else (with the store's own embedder), never into a store with other documents, never from a read-only server,
never into another data dir."""

import functools
import json
import logging

import pytest
from conftest import run_cli
from nextpara.attention_core.bootstrap import builtin_embedder, ensure_default_store
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
def builtin_sample(n: int) -> tuple[dict, ...]:
    return tuple({"doc_id": d.doc_id, "paragraphs": d.paragraphs[:3]} for _, d in zip(range(n), builtin_documents()))


def test_a_default_store_with_other_documents_is_served_as_it_is(default_dir, tmp_path, caplog):
    mine = {"doc_id": "my-notes", "paragraphs": ["A paragraph of my own.", "And the one after it."]}
    build(write_corpus(tmp_path / "mine.jsonl", [*builtin_sample(2), mine]), default_dir, quiet=True)
    with caplog.at_level(logging.INFO, logger="nextpara.attention_core.bootstrap"):
        assert builtin_embedder(default_dir) is None
        ensure_default_store(default_dir, quiet=True)
    with open_store(default_dir, readonly=True) as store:
        assert [d.doc_id for d in store.list_documents(limit=10)] == sorted(
            [*(d["doc_id"] for d in builtin_sample(2)), "my-notes"])  # nothing added, nothing changed
    assert "holds documents not from the built-in corpus (my-notes among them): served as it is" in caplog.text


def test_a_store_of_built_in_documents_alone_is_completed_with_its_own_embedder(default_dir, tmp_path):
    assert builtin_embedder(default_dir) == "minilm"  # empty: the first run builds
    build(write_corpus(tmp_path / "part.jsonl", builtin_sample(3)), default_dir, embedder="minilm-int8", quiet=True)
    assert builtin_embedder(default_dir) == "minilm-int8"  # as a first run stopped halfway: the next completes it
    assert builtin_embedder(default_dir, read_only=True) is None  # but never from a replica
    assert builtin_embedder(DataDir(tmp_path / "elsewhere")) is None  # and never into another data dir


def test_serve_read_only_on_an_empty_default_dir_builds_nothing(default_dir):
    r = run_cli("serve", "--read-only", "--address", "127.0.0.1:0", "--metrics-address", "", timeout=120,
                env={"NEXTPARA_DATA_DIR": str(default_dir)})
    assert r.returncode == 2 and "no nextpara store" in r.stderr.lower(), r.stderr
    assert not (default_dir / "paragraphs.sqlite").exists()
