"""ListDocuments and GetDocument: a real server on 127.0.0.1 over a real store; paging while
another thread writes; a store from before documents recorded their generation."""

import shutil
import sqlite3
import threading
import time

import pytest
from conftest import unit_vectors, vector_store
from nextpara.client import InvalidArgument, NotFound
from nextpara.store.store import open_store


def every_page(client, page_size: int, between=lambda: None) -> list:
    documents, token = [], ""
    while True:
        page = client.list_documents(page_size, token)
        documents += page.documents
        if not page.next_page_token:
            return documents
        token = page.next_page_token
        between()


def test_list_and_get_what_is_stored(client):
    info = client.info()
    listed = every_page(client, 7)
    ids = [d.doc_id for d in listed]
    assert ids == sorted(set(ids)) and len(ids) == info.documents
    assert sum(d.paragraphs for d in listed) == info.paragraphs
    first = client.list_documents()
    assert len(first.documents) == min(100, info.documents) and first.index_version == info.index_version
    one = client.get_document(listed[3].doc_id)
    assert one.document == listed[3] and len(one.paragraphs) == listed[3].paragraphs
    assert [p.position for p in one.paragraphs] == list(range(len(one.paragraphs)))
    assert client.get_paragraphs([p.paragraph_id for p in one.paragraphs]) == one.paragraphs


def test_a_documents_generation_is_the_write_that_last_changed_it(client):
    texts = ["The first paragraph of a listed document.", "Its second.", "Its third."]
    added = client.add_documents([{"doc_id": "list-gen", "title": "Listed", "paragraphs": texts}])
    doc = client.get_document("list-gen")
    assert (doc.document.title, doc.document.paragraphs, doc.document.generation) == ("Listed", 3, added.index_version)
    assert [p.text for p in doc.paragraphs] == texts and all(p.doc_id == "list-gen" for p in doc.paragraphs)
    client.add_documents([{"doc_id": "list-other", "paragraphs": ["Another write."]}])
    same = client.add_documents([{"doc_id": "list-gen", "title": "Listed", "paragraphs": texts}])
    assert same.documents_unchanged == 1 and client.get_document("list-gen").document.generation == added.index_version
    replaced = client.add_documents([{"doc_id": "list-gen", "title": "Listed", "paragraphs": texts[:2]}])
    doc = client.get_document("list-gen")
    assert doc.document.generation == replaced.index_version > added.index_version and len(doc.paragraphs) == 2
    client.delete_documents(["list-gen", "list-other"])
    with pytest.raises(NotFound) as err:
        client.get_document("list-gen")
    assert err.value.reason == "UNKNOWN_IDS" and err.value.metadata["missingIds"] == '["list-gen"]'


@pytest.mark.parametrize("token", ["not-a-token", "eyJ2IjogMn0=", "\u00e9"])
def test_a_page_token_this_server_did_not_make_is_refused(client, token):
    with pytest.raises(InvalidArgument) as err:
        client.list_documents(5, token)
    assert (err.value.reason, err.value.field) == ("INVALID_PAGE_TOKEN", "page_token")


def test_get_document_needs_a_doc_id(client):
    with pytest.raises(InvalidArgument) as err:
        client.get_document("")
    assert (err.value.reason, err.value.field) == ("FIELD_REQUIRED", "doc_id")


def test_paging_while_another_thread_writes_never_skips_or_repeats(client):
    """The writer adds and deletes documents whose doc_ids sort among the stored ones, and replaces stored documents
    (a replace deletes and re-inserts their rows); every document stored throughout must be listed exactly once."""
    stable = [d.doc_id for d in every_page(client, 100)]
    replaced = stable[::9]
    stop = threading.Event()
    writes = []

    def writer():
        i = 0
        while not stop.is_set():
            churn = f"{stable[(i * 7) % len(stable)]}-churn-{i}"  # sorts right after a stored doc_id
            client.add_documents([{"doc_id": churn, "paragraphs": [f"Churn document {i}."]},
                                  {"doc_id": replaced[i % len(replaced)], "paragraphs": [f"Replaced, round {i}."]}])
            if i % 2:
                client.delete_documents([f"{stable[((i - 1) * 7) % len(stable)]}-churn-{i - 1}"])
            writes.append(i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        listed = [d.doc_id for d in every_page(client, 4, between=lambda: time.sleep(0.01))]
    finally:
        stop.set()
        thread.join()
    assert len(writes) >= 3, "the writer must have written while the pages were read"
    assert listed == sorted(set(listed))  # in order, none twice
    assert set(stable) <= set(listed)  # none skipped, the replaced ones included
    assert all("-churn-" in d for d in set(listed) - set(stable))
    leftovers = [d.doc_id for d in every_page(client, 1000) if "-churn-" in d.doc_id]
    client.delete_documents(leftovers)


def test_a_store_from_before_document_generations(tmp_path):
    store_dir = vector_store(tmp_path, "toy", [("a", ["one", "two"], unit_vectors(2, 8, seed=1)),
                                               ("b", ["three"], unit_vectors(1, 8, seed=2))])
    with sqlite3.connect(store_dir / "paragraphs.sqlite") as db:
        db.execute("ALTER TABLE documents DROP COLUMN generation")  # as an older nextpara made it
    old = tmp_path / "old"
    shutil.copytree(store_dir, old)
    with open_store(old, readonly=True) as store:
        assert [(r.doc_id, r.paragraphs, r.generation) for r in store.list_documents()] == [("a", 2, 0), ("b", 1, 0)]
        row, paragraphs = store.get_document("a")
        assert row.generation == 0 and [p.text for p in paragraphs] == ["one", "two"]
    with open_store(old) as store:  # the first writable open adds the column
        from nextpara.store.corpus import Document

        result = store.add_documents([Document("c", ["four"], vectors=unit_vectors(1, 8, seed=3).tolist())],
                                     [unit_vectors(1, 8, seed=3)])
        assert [(r.doc_id, r.generation) for r in store.list_documents("a", 10)] == [("b", 0), ("c", result.generation)]
    with open_store(old, readonly=True) as store:
        assert store.get_document("c")[0].generation == result.generation
