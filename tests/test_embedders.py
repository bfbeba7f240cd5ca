"""Embedders: the real MiniLM model, the cache, and the OpenAI-compatible HTTP embedder."""

import json
import subprocess
import sys

import numpy as np
import pytest
from nextpara.errors import FailedPreconditionError, InvalidInputError
from nextpara.store.embedders import (
    MINILM_INT8_NAME,
    MINILM_NAME,
    PrecomputedEmbedder,
    embedder_for_store,
    make_embedder,
)
from nextpara.store.embedding_cache import CachedEmbedder
from nextpara.store.http_embedder import EmbeddingServiceError, OpenAIEmbedder
from nextpara.store.ingest import build
from nextpara.store.store import open_store
from openai_fake import FakeEmbeddingsServer, fake_vector

TEXTS = ["The cat sat on the mat.", "A cat was sitting on a rug.", "Quarterly revenue grew by four percent."]


def test_minilm_shape_normalisation_and_meaning(minilm):
    v = minilm.embed(TEXTS)
    assert minilm.name == MINILM_NAME and v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3  # paraphrases closer than unrelated text
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_int8_is_close_to_fp32_and_named_apart(minilm):
    int8 = make_embedder("minilm-int8")
    a, b = minilm.embed(TEXTS), int8.embed(TEXTS)
    assert int8.name == MINILM_INT8_NAME != minilm.name and b.shape == a.shape
    cos = (a * b).sum(1)
    assert (cos > 0.9).all() and not np.allclose(a, b)  # quantised: close, not equal (see bench/results/embed_speed.md)
    assert embedder_for_store("minilm-int8", MINILM_INT8_NAME, 384).name == MINILM_INT8_NAME


def test_bfloat16_autocast_is_within_cosine_0_9999_of_float32_and_the_setting_is_checked(monkeypatch):
    """NEXTPARA_BF16=1: the same embedder (bfloat16 is emulated on a CPU without instructions for it: slower, still
    right); unset, float32."""
    from nextpara.store import embedders

    fp32, bf16 = (make_embedder("minilm") for _ in range(2))
    fp32.bf16, bf16.bf16 = False, True
    a, b = fp32.embed(TEXTS), bf16.embed(TEXTS)
    assert bf16.name == fp32.name and not np.array_equal(a, b)
    assert ((a * b).sum(1) > 0.9999).all()
    monkeypatch.delenv("NEXTPARA_BF16", raising=False)
    assert (make_embedder("minilm").bf16, make_embedder("minilm").batch_size) == (False, 8)  # float32 by default
    monkeypatch.setenv("NEXTPARA_BF16", "0")
    assert not make_embedder("minilm").bf16
    monkeypatch.setenv("NEXTPARA_BF16", "1")
    assert (make_embedder("minilm").bf16, make_embedder("minilm").batch_size) == (True, 16)
    assert not make_embedder("minilm-int8").bf16
    monkeypatch.setenv("NEXTPARA_BF16", "yes")
    with pytest.raises(InvalidInputError, match="NEXTPARA_BF16='yes': expected 1"):
        embedders.use_bf16()


def test_cache_hits_cost_no_model_time(minilm, tmp_path):
    cached = CachedEmbedder(minilm, tmp_path / "cache.sqlite")
    first = cached.embed(TEXTS + TEXTS[:1])
    assert (cached.hits, cached.misses) == (1, 3)  # the repeated text embedded once, as a later call would find it
    np.testing.assert_array_equal(first[3], first[0])
    again = CachedEmbedder(minilm, tmp_path / "cache.sqlite")  # a new process would see the same file
    second = again.embed(TEXTS[::-1])
    assert (again.hits, again.misses) == (3, 0)
    np.testing.assert_array_equal(second, first[:3][::-1])
    other = CachedEmbedder(PrecomputedEmbedder("other-model", dim=384), tmp_path / "cache.sqlite")
    with pytest.raises(InvalidInputError, match="cannot embed text"):
        other.embed(TEXTS[:1])  # the key includes the embedder: MiniLM's vectors are not reused


def test_a_build_counts_repeated_texts_apart_from_cached_ones_and_times_the_model_apart_from_loading_it(
        tmp_path, monkeypatch, capsys):
    """A first build into an empty cache said "156 from cache" for the texts it had repeated, and its rate ("3
    embedded in 5.1s (1/s)") counted the seconds of loading MiniLM as embedding."""
    from argparse import Namespace

    from nextpara.store.cli import print_build

    monkeypatch.setenv("NEXTPARA_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"doc_id": "a", "paragraphs": ["Alpha one.", "Shared text.", "Shared text."]}) + "\n"
                      + json.dumps({"doc_id": "b", "paragraphs": ["Shared text.", "Beta two."]}) + "\n")
    first = build(str(corpus), tmp_path / "one", quiet=True)
    assert (first.paragraphs_embedded, first.cache_hits, first.paragraphs_repeated) == (3, 0, 2)
    assert first.model_load_seconds > 0 and first.embed_seconds < first.total_seconds - first.model_load_seconds
    print_build(Namespace(json=False), first)
    line = capsys.readouterr().out
    assert "3 embedded in" in line and "loading the model" in line and "0 from the embedding cache, 2 repeated" in line
    second = build(str(corpus), tmp_path / "two", quiet=True)  # another store, the same cache: nothing to embed
    assert (second.paragraphs_embedded, second.cache_hits, second.paragraphs_repeated) == (0, 3, 2)
    assert second.model_load_seconds == 0  # (MiniLM's dimension is declared: a build that embeds nothing never loads it)
    print_build(Namespace(json=False), second)
    assert "loading the model" not in capsys.readouterr().out


def test_a_build_says_which_paragraphs_are_longer_than_the_model_reads(tmp_path, capsys, monkeypatch):
    """MiniLM reads 256 word pieces of a text and embeds that beginning; a build stored a longer paragraph without a
    word, so a user could not know that most of it counted for nothing in its vector. Counted whether the model or
    the embedding cache gives the vector."""
    from argparse import Namespace

    from nextpara.store.cli import print_build

    long = " ".join(f"word{i}" for i in range(300))  # well over 256 word pieces
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"doc_id": "a", "paragraphs": ["Short one.", "Short two."]}) + "\n"
                      + json.dumps({"doc_id": "b", "paragraphs": ["Short three.", long, long + " more", long]}) + "\n")
    report = build(str(corpus), tmp_path / "store", quiet=True, use_cache=False)
    assert (report.paragraphs_cut, report.first_cut, report.model_reads_tokens) == (3, "'b'[1]", 256)
    print_build(Namespace(json=False), report)
    out = capsys.readouterr()
    assert "3 paragraph text(s) longer than the model reads (256 word pieces; the first: 'b'[1])" in out.err
    assert "no embedding cache" in out.out and "embedded once" not in out.out  # (without it, nothing is embedded once)
    monkeypatch.setenv("NEXTPARA_CACHE_DIR", str(tmp_path / "cache"))
    for store in ("warm", "from-cache"):  # the second store's vectors all come from the cache: still cut
        report = build(str(corpus), tmp_path / store, quiet=True)
        assert (report.paragraphs_cut, report.first_cut) == (3, "'b'[1]")
    assert report.paragraphs_embedded == 0
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"doc_id": "a", "paragraphs": ["Short one.", "x " * 200]}) + "\n")  # 202 pieces: read whole
    report = build(str(short), tmp_path / "other", quiet=True, use_cache=False)
    assert (report.paragraphs_cut, report.first_cut) == (0, "")
    print_build(Namespace(json=False), report)
    assert "longer than the model reads" not in capsys.readouterr().err


def test_threads_that_embed_at_once_all_get_their_vectors(minilm):
    """A server embeds on its read workers and its write thread at once. Counting the texts a model reads in part by
    calling its shared tokenizer with other truncation settings broke calls running beside it ("Unable to create
    tensor, you should probably activate truncation and/or padding")."""
    import threading

    texts = [[f"thread {k} text {i} " * (1 + i % 5), "another short one"] for k in range(8) for i in range(50)]
    expected = {tuple(t): v for t, v in zip(map(tuple, texts[:5]), (minilm.embed(t) for t in texts[:5]))}
    errors, got = [], {}

    def work(k):
        for t in texts[k::8]:
            try:
                got[tuple(t)] = minilm.embed(t)
                over = minilm.over_length(t)  # (its own tokenizer: the model's is left as embed() sets it)
                assert over == ([], 256), over
            except Exception as e:  # noqa: BLE001 - each one is the failure under test
                errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(got) == len(texts)
    assert all(np.allclose(got[t], v, atol=1e-5) for t, v in expected.items())


def test_over_length_counts_across_its_chunks(minilm):
    long = " ".join(f"word{i}" for i in range(300))
    texts = ["Short."] * 1030
    texts[3] = texts[1027] = long  # one in the first chunk of 1,024, one in the second: indices into the whole list
    assert minilm.over_length(texts) == ([3, 1027], 256)


def test_a_model_without_a_transformers_tokenizer_embeds_and_cannot_tell_what_it_cuts(tmp_path):
    """A sentence-transformers model of static word vectors has a tokenizers.Tokenizer, which cannot be called as
    the count called it: every embedding of such a model failed."""
    from nextpara.store.embedders import bundled_minilm_path
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    try:
        from sentence_transformers.models import StaticEmbedding
    except ImportError:  # (where a later sentence-transformers keeps it)
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    tokenizer = Tokenizer.from_file(str(bundled_minilm_path() / "tokenizer.json"))
    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=16)]).save(str(tmp_path / "static"))
    static = make_embedder(f"sentence-transformers:{tmp_path / 'static'}")
    assert static.embed(["Some text.", "Another."]).shape == (2, 16)
    assert static.over_length(["Some text."]) == ([], 0)


def test_unknown_embedder_spec():
    with pytest.raises(InvalidInputError, match="unknown embedder 'word2vec'"):
        make_embedder("word2vec")
    with pytest.raises(FailedPreconditionError, match="does not exist"):
        make_embedder("sentence-transformers:/nonexistent/model").embed(["x"])


def test_openai_wire_format_batching_and_retries(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "test-key")
    with FakeEmbeddingsServer(dim=1536) as server:
        emb = OpenAIEmbedder("text-embedding-ada-002", base_url=server.base_url, api_key_env="TEST_KEY",
                             batch_size=2, backoff=0.01)
        server.fail_next = [429, 503]
        v = emb.embed(TEXTS)
        assert v.shape == (3, 1536) and emb.dim == 1536 and emb.name == "openai:text-embedding-ada-002"
        expected = np.asarray([fake_vector(t, 1536) for t in TEXTS], np.float32)
        np.testing.assert_allclose(v, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
        ok = [r for r in server.requests if r["path"] == "/v1/embeddings"]
        assert len(ok) == 4  # two failures retried, then two batches of at most 2
        assert ok[-1]["body"] == {"model": "text-embedding-ada-002", "input": [TEXTS[2]]}
        assert all(r["auth"] == "Bearer test-key" for r in ok)
        server.fail_next = [400]
        with pytest.raises(EmbeddingServiceError, match="answered 400: .*simulated 400"):
            emb.embed(["x"])
        server.fail_next = [500] * 3
        emb.max_retries = 2
        with pytest.raises(EmbeddingServiceError, match="failed 3 times, last: HTTP 500"):
            emb.embed(["y"])
        # an answer it cannot use is the endpoint's failure, and the next good answer is taken: nothing is pinned by it
        store_side = OpenAIEmbedder("text-embedding-ada-002", base_url=server.base_url, api_key_env="TEST_KEY", dim=1536)
        server.dim = 1000
        with pytest.raises(EmbeddingServiceError, match="answered vectors of dimension 1000 where 1536 were expected"):
            store_side.embed(["w"])
        server.dim, server.zeros = 1536, True
        with pytest.raises(EmbeddingServiceError, match="answered .*all zeros"):
            store_side.embed(["w"])
        server.zeros = False
        assert store_side.embed(["w"]).shape == (1, 1536) and store_side.dim == 1536
    monkeypatch.delenv("TEST_KEY")
    with pytest.raises(FailedPreconditionError, match="TEST_KEY is not set"):
        emb.embed(["z"])


def test_build_with_openai_embedder(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("NEXTPARA_EMBEDDINGS_URL", raising=False)
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nFirst paragraph of a.\n\nSecond paragraph of a.\n")
    (corpus / "b.txt").write_text("Only paragraph of b.\n")
    with FakeEmbeddingsServer(dim=1536) as server:
        options = {"base_url": server.base_url}
        report = build(str(corpus), tmp_path / "store", embedder="openai:text-embedding-ada-002", quiet=True,
                       embedder_options=options, use_cache=False)
        assert report.paragraphs_written == 3 and report.documents_added == 2
        with open_store(tmp_path / "store", readonly=True) as store:
            assert store.dim == 1536 and store.embedder_name == "openai:text-embedding-ada-002"
            query = OpenAIEmbedder("text-embedding-ada-002", base_url=server.base_url).embed(["Second paragraph of a."])
            _, ids = store.search(query, 1)
            assert store.get_paragraphs(ids[0])[0].text == "Second paragraph of a."
        n = len(server.requests)
        again = build(str(corpus), tmp_path / "store", embedder="openai:text-embedding-ada-002", quiet=True,
                      embedder_options=options, use_cache=False)
        assert again.documents_unchanged == 2 and again.paragraphs_embedded == 0
        assert len(server.requests) == n  # the store knows its dimension, and unchanged documents are not embedded
        monkeypatch.setenv("NEXTPARA_CACHE_DIR", str(tmp_path / "cache"))  # a new store, through the cache: the text
        cached = build(str(corpus), tmp_path / "cached", embedder="openai:text-embedding-ada-002", quiet=True,
                       embedder_options=options)  # that told the dimension is counted once (it was twice)
        assert (cached.paragraphs_embedded, cached.cache_hits, cached.paragraphs_written) == (3, 0, 3)
        with FakeEmbeddingsServer(dim=1536) as elsewhere:  # another endpoint, one model name: no vector of the first's
            other = build(str(corpus), tmp_path / "elsewhere", embedder="openai:text-embedding-ada-002", quiet=True,
                          embedder_options={"base_url": elsewhere.base_url})
            assert (other.paragraphs_embedded, other.cache_hits) == (3, 0)
        again = build(str(corpus), tmp_path / "cached2", embedder="openai:text-embedding-ada-002", quiet=True,
                      embedder_options=options)  # the same endpoint: its vectors are cached
        assert (again.paragraphs_embedded, again.cache_hits) == (0, 3)
        # the store remembers the endpoint (and the key's variable, not the key): its queries' texts go there, not to
        # OpenAI's default URL, with no option or variable set
        with open_store(tmp_path / "store", readonly=True) as store:
            assert store.embedder_options == {"base_url": server.base_url, "api_key_env": "OPENAI_API_KEY"}
            query = store.query_embedder()
            assert (query.base_url, query.dim, query.max_retries) == (server.base_url, 1536, 2)
        found = subprocess.run([sys.executable, "-m", "nextpara", "search", "Second paragraph of a.", "--data-dir",
                                str(tmp_path / "store"), "-k", "1", "--json"], capture_output=True, text=True, timeout=120)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["results"][0]["text"] == "Second paragraph of a."
        info = subprocess.run([sys.executable, "-m", "nextpara", "info", "--data-dir", str(tmp_path / "store")],
                              capture_output=True, text=True, timeout=120).stdout
        assert f"endpoint      {server.base_url}, key in $OPENAI_API_KEY (query texts are embedded there)" in info
        assert server.requests[-1]["body"]["input"] == ["Second paragraph of a."]
        assert not [f for f in (tmp_path / "store").rglob("*") if f.is_file() and b"test-key" in f.read_bytes()]
        # a rebuild with no option keeps the remembered endpoint: a new document is embedded there, not at OpenAI's
        (corpus / "c.txt").write_text("A paragraph added later.\n")
        sent = len(server.requests)
        assert build(str(corpus), tmp_path / "store", embedder="openai:text-embedding-ada-002", quiet=True,
                     use_cache=False).documents_added == 1
        assert len(server.requests) == sent + 1 and server.requests[-1]["body"]["input"] == ["A paragraph added later."]
        with open_store(tmp_path / "store", readonly=True) as store:
            assert store.embedder_options == {"base_url": server.base_url, "api_key_env": "OPENAI_API_KEY"}
        # vectors brought from an endpoint's model: the store embeds query texts there (--embedder-url remembered)
        brought = tmp_path / "brought.jsonl"
        brought.write_text(json.dumps({"doc_id": "b", "paragraphs": ["Brought."],
                                       "vectors": [fake_vector("Brought.", 1536)]}) + "\n")
        made = subprocess.run([sys.executable, "-m", "nextpara", "-q", "build", "--corpus", str(brought), "--data-dir",
                               str(tmp_path / "brought"), "--embedder", "precomputed:openai:text-embedding-ada-002",
                               "--embedder-url", server.base_url, "--no-guard"], capture_output=True, text=True,
                              timeout=120)
        assert made.returncode == 0, made.stderr
        with open_store(tmp_path / "brought", readonly=True) as store:
            assert store.query_embedder().base_url == server.base_url


def test_local_sentence_transformers_directory(minilm):
    from nextpara.store.embedders import bundled_minilm_path

    local = make_embedder(f"sentence-transformers:{bundled_minilm_path()}")
    assert local.name == "sentence-transformers:model" and local.dim == 384
    np.testing.assert_allclose(local.embed(TEXTS), minilm.embed(TEXTS), atol=1e-5)


def test_a_model_directory_declares_its_dimension(tmp_path):
    """declared_dim reads what sentence-transformers itself writes (so a build with nothing new to embed never loads
    the model), for the bundled model and for one saved with two pooling modes and a Dense layer; a module of
    another kind, or a directory without its files, leaves it to the loaded model."""
    import json

    from nextpara.store.embedders import bundled_minilm_path, declared_dim, model_dimension
    from sentence_transformers import SentenceTransformer

    assert declared_dim(bundled_minilm_path()) == 384  # its Pooling config has the legacy pooling_mode_* flags
    st_modules = pytest.importorskip("sentence_transformers.sentence_transformer.modules",
                                     reason="the modules' layout of sentence-transformers 6")
    base = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    saved = tmp_path / "cls-mean-dense"
    SentenceTransformer(modules=[base[0], st_modules.Pooling(384, pooling_mode=["cls", "mean"]),
                                 st_modules.Dense(768, 96), st_modules.Normalize()], device="cpu").save(str(saved))
    loaded = SentenceTransformer(str(saved), device="cpu")
    assert declared_dim(saved) == model_dimension(loaded) == 96 == loaded.encode(["A text."]).shape[1]
    modules = json.loads((saved / "modules.json").read_text())
    (saved / "modules.json").write_text(json.dumps(modules[:2]))  # no Dense: the two pooled widths side by side
    assert declared_dim(saved) == 768
    (saved / "modules.json").write_text(json.dumps([*modules[:2], {**modules[2], "type": "mypackage.Dense"}]))
    assert declared_dim(saved) is None  # not sentence-transformers' own Dense
    (saved / "modules.json").write_text(json.dumps(modules[:2]))
    settings = json.loads((saved / "config_sentence_transformers.json").read_text())
    (saved / "config_sentence_transformers.json").write_text(json.dumps({**settings, "truncate_dim": 64}))
    assert declared_dim(saved) is None and model_dimension(SentenceTransformer(str(saved), device="cpu")) == 64
    assert declared_dim(tmp_path / "empty") is None


def test_a_builds_progress_follows_the_embedding(minilm):
    """The bar moved once per committed batch (1,024 paragraphs by default), sitting at 0% through half a small build."""
    from nextpara.store.corpus import Document
    from nextpara.store.ingest import PROGRESS_CHUNK, vectors_for

    docs = [Document(doc_id=f"d{i}", title="", paragraphs=[f"Paragraph {j} of document {i} about topic {i * 7 + j}."
                                                            for j in range(60)]) for i in range(10)]
    steps = []
    stepped = vectors_for(minilm, docs, steps.append)
    assert steps == [PROGRESS_CHUNK, PROGRESS_CHUNK, 600 - 2 * PROGRESS_CHUNK]
    whole = vectors_for(minilm, docs)  # one call: the same vectors, up to the batch's float rounding
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(stepped, whole))
