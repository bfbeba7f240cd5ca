"""The built-in corpus's vectors that ship with the package (store/shipped_vectors.py): what they hold, that they are
the model's, and that a build takes them instead of running the model, and only where it should."""

import json
import platform
import random

import numpy as np
import pytest
from nextpara.store.builtin_corpus import builtin_documents
from nextpara.store.corpus import text_hash
from nextpara.store.embedders import MINILM_NAME, make_embedder
from nextpara.store.embedding_cache import CachedEmbedder
from nextpara.store.ingest import build
from nextpara.store.shipped_vectors import PATH, ShippedVectors, shipped


@pytest.fixture(scope="module")
def builtin_paragraphs() -> list[str]:
    return list(dict.fromkeys(p for doc in builtin_documents() for p in doc.paragraphs))


def test_the_file_covers_this_interpreters_built_in_corpus(builtin_paragraphs):
    package = ShippedVectors(PATH)
    assert package.embedder == MINILM_NAME
    if package.made_on != platform.python_version():
        pytest.skip(f"the file was made on Python {package.made_on}, this is {platform.python_version()}: "
                    "its built-in corpus differs")
    held = package.lookup(MINILM_NAME, [text_hash(t) for t in builtin_paragraphs])
    lacking = [t for t in builtin_paragraphs if text_hash(t) not in held]
    assert not lacking, (f"{len(lacking)} built-in paragraphs lack a shipped vector (first: {lacking[0][:60]!r}): "
                         "run `python -m nextpara.store.shipped_vectors` to write the file again")
    assert len(package) == len(builtin_paragraphs)


def test_shipped_vectors_are_the_models(minilm, builtin_paragraphs):
    sample = random.Random(0).sample(builtin_paragraphs, 64)
    held = shipped().lookup(MINILM_NAME, [text_hash(t) for t in sample])
    sample = [t for t in sample if text_hash(t) in held]
    assert len(sample) >= 32  # most of them, whatever the Python version
    ours = np.stack([held[text_hash(t)] for t in sample])
    model = minilm.embed(sample)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(ours, model, atol=1e-5)  # float32 as the model gives them (batches differ by 2e-7)
    assert shipped().lookup("openai:text-embedding-ada-002", [text_hash(sample[0])]) == {}  # another model's: none
    assert len(shipped("openai:text-embedding-ada-002")) == 0 and len(shipped(MINILM_NAME)) == len(shipped())


def test_a_build_of_built_in_documents_runs_no_model_and_no_cache_means_none(tmp_path, monkeypatch, minilm):
    package = shipped()
    docs = [d for d in builtin_documents()
            if len(package.lookup(MINILM_NAME, [text_hash(p) for p in d.paragraphs])) == len(set(d.paragraphs))][:5]
    assert len(docs) == 5, "fewer than 5 built-in documents of this Python are wholly in the file"
    corpus = tmp_path / "five.jsonl"
    corpus.write_text("".join(json.dumps({"doc_id": d.doc_id, "paragraphs": d.paragraphs}) + "\n" for d in docs))
    n = sum(len(d.paragraphs) for d in docs)
    embedder = CachedEmbedder(minilm, tmp_path / "cache.sqlite")
    vectors = embedder.embed([p for d in docs for p in d.paragraphs] + ["A sentence no built-in document has, surely."])
    assert (embedder.hits, embedder.shipped_hits, embedder.misses) == (n, n, 1) and vectors.shape == (n + 1, 384)
    embedder.close()

    fresh = CachedEmbedder(make_embedder("minilm"), tmp_path / "empty-cache.sqlite")
    fresh.embed([p for d in docs for p in d.paragraphs])
    assert fresh.inner._model is None  # the model was never loaded
    fresh.close()

    monkeypatch.setenv("NEXTPARA_CACHE_DIR", str(tmp_path / "build-cache"))
    report = build(str(corpus), tmp_path / "store", quiet=True)
    assert (report.paragraphs_written, report.shipped_hits, report.paragraphs_embedded) == (n, n, 0)
    uncached = build(str(corpus), tmp_path / "store-no-cache", quiet=True, use_cache=False)
    assert (uncached.paragraphs_written, uncached.shipped_hits, uncached.paragraphs_embedded) == (n, 0, n)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_damaged_file_means_the_model_embeds(tmp_path, monkeypatch, caplog, minilm, damage):
    """Only a cache: without a readable file a build embeds what it needs, and says why once."""
    import nextpara.store.shipped_vectors as module

    path = tmp_path / "shipped_vectors.safetensors"
    if damage == "truncated":
        path.write_bytes(PATH.read_bytes()[:1000])
    monkeypatch.setattr(module, "PATH", path)
    text = next(p for doc in builtin_documents() for p in doc.paragraphs)
    embedder = CachedEmbedder(minilm, tmp_path / "cache.sqlite")
    with caplog.at_level("WARNING", logger="nextpara.store.shipped_vectors"):
        first = embedder.embed([text])
        embedder.embed(["Another text, so another miss."])
    assert (embedder.shipped_hits, embedder.misses) == (0, 2)
    np.testing.assert_allclose(first, minilm.embed([text]), atol=1e-5)
    warnings = [r.getMessage() for r in caplog.records]
    why = "is missing from the package" if damage == "missing" else "cannot be read (Error while deserializing"
    assert len(warnings) == 1 and warnings[0].startswith(f"{path} {why}"), warnings


def test_another_embedder_reads_no_shipped_vectors(tmp_path):
    text = next(p for doc in builtin_documents() for p in doc.paragraphs)
    embedder = CachedEmbedder(make_embedder("minilm-int8"), tmp_path / "cache.sqlite")
    embedder.embed([text])
    assert (embedder.shipped_hits, embedder.misses) == (0, 1) and len(embedder._package) == 0
