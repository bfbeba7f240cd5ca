"""Word-overlap features: the TF-IDF arithmetic by hand, the checkpoint carrying the IDF vector, and a
model that learns to use words where the vectors say nothing."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import count_word_searches, vector_store
from nextpara.attention_core import lexical
from nextpara.attention_core.checkpoint import load_checkpoint, save_checkpoint
from nextpara.attention_core.model import NextParagraphModel
from nextpara.attention_core.model_config import RerankerConfig
from nextpara.attention_core.predictor import Predictor
from nextpara.attention_core.sequences import ParagraphSequences
from nextpara.attention_core.train_config import TrainConfig
from nextpara.attention_core.train_flow import train
from nextpara.attention_core.word_rows import StoredWordRows


def test_features_agree_with_a_hand_computed_example():
    corpus = ["alpha beta", "alpha gamma", "beta gamma gamma", "delta"]
    lx = lexical.Lexicon.fit(corpus)
    idf = {w: math.log(5 / 3) + 1 for w in ("alpha", "beta", "gamma")}  # each in 2 of 4 texts
    assert lx.idf[lexical.token_counts("delta")[0]].tolist() == pytest.approx([math.log(5 / 2) + 1])  # in 1 of 4
    assert lx.idf[lexical.token_counts("epsilon")[0]].tolist() == pytest.approx([math.log(5) + 1])  # never seen: rarest
    # candidate "gamma gamma alpha": weights gamma (1 + ln 2) idf, alpha idf; context "alpha beta", "gamma"
    cand = np.array([idf["gamma"] * (1 + math.log(2)), idf["alpha"]])
    cand = cand / np.linalg.norm(cand)
    by_hand_first = cand[1] * (1 / math.sqrt(2))  # shares alpha with "alpha beta" (unit weights 1/sqrt 2 each)
    by_hand_second = cand[0]  # "gamma" alone is the unit vector on gamma
    whole = np.array([1 / math.sqrt(2), 1 / math.sqrt(2), 1.0])  # alpha, beta, gamma: sum of the two rows
    by_hand_whole = (cand[1] * whole[0] + cand[0] * whole[2]) / np.linalg.norm(whole)
    got = lexical.features(lx.matrix(["Alpha beta!", "gamma"]), lx.matrix(["gamma gamma alpha", "delta", None]), 4)
    assert got.shape == (3, lexical.n_features(4))
    np.testing.assert_allclose(got[0], [0, 0, by_hand_first, by_hand_second, by_hand_whole, 1.0], rtol=1e-5)
    np.testing.assert_array_equal(got[1], [0, 0, 0, 0, 0, 1.0])  # words, none shared: no overlap, flag 1
    np.testing.assert_array_equal(got[2], 0.0)  # a missing text: no overlap, flag 0
    only_vectors = lexical.features(lx.matrix([None, None]), lx.matrix(["alpha"]), 4)
    np.testing.assert_array_equal(only_vectors, 0.0)


def test_what_the_last_paragraph_adds_by_hand():
    """novel: the cosine to the last paragraph's words that no earlier context paragraph has, and the share of the
    candidate's weight on words the context lacks; the first L + 2 columns are those without novel."""
    lx = lexical.Lexicon(np.ones(lexical.N_BUCKETS, np.float32))  # every word weighs 1: rows are plain unit vectors
    context = lx.matrix(["alpha beta", "beta gamma"])  # the last adds gamma; beta the document had already
    candidates = lx.matrix(["gamma delta", "beta delta", "alpha", "epsilon", None])
    got = lexical.features(context, candidates, 4, novel=True)
    assert got.shape == (5, lexical.n_features(4, True)) == (5, 8)
    np.testing.assert_allclose(got[:, :6], lexical.features(context, candidates, 4), rtol=1e-6)
    h = 1 / math.sqrt(2)
    np.testing.assert_allclose(got[:, 6], [h, 0, 0, 0, 0], atol=1e-6)  # only gamma is new in the last paragraph
    np.testing.assert_allclose(got[:, 7], [0.5, 0.5, 0, 1, 0], atol=1e-6)  # delta, epsilon: words the context lacks
    only_last = lexical.features(lx.matrix(["beta gamma"]), candidates[:1], 4, novel=True)
    np.testing.assert_allclose(only_last[0, 6], only_last[0, 3], rtol=1e-6)  # no earlier paragraph: all of it is new
    rows = lexical.stack([lx.row(t) for t in ("gamma delta", "alpha", "epsilon")])
    batch = lexical.features_many([context, None, context], rows, [1, 1, 1], 4, novel=True)
    np.testing.assert_allclose(batch[0][0], got[0], rtol=1e-6)
    assert not batch[1].any() and batch[2][0, 7] == pytest.approx(1.0)


def test_checkpoint_carries_the_idf_vector_and_older_checkpoints_load(tmp_path):
    model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2))
    idf = torch.rand(lexical.N_BUCKETS)
    model.lexicon_idf.copy_(idf)
    save_checkpoint(tmp_path / "model.safetensors", model, {"embedder": {"name": "e", "dim": 16}})
    loaded, _ = load_checkpoint(tmp_path / "model.safetensors", "e", 16)
    assert torch.equal(loaded.lexicon_idf, idf)
    # a checkpoint written before the lexical features: its config has no "lexical" key and no idf tensor
    from safetensors.torch import save_file

    old = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2, lexical=False))
    cfg = {k: v for k, v in old.cfg.__dict__.items() if k != "lexical"}
    save_file({k: v.contiguous() for k, v in old.state_dict().items()}, str(tmp_path / "old.safetensors"),
              metadata={"nextpara": json.dumps({"model_config": cfg, "embedder": {"name": "e", "dim": 16}})})
    loaded_old, _ = load_checkpoint(tmp_path / "old.safetensors", "e", 16)
    assert loaded_old.cfg.lexical is False


def linked_docs(n_docs=100, n_par=8, dim=16, seed=0):
    """A document's vectors scatter around its own direction in random order, so cosine finds the document
    but not which of its paragraphs comes next; each paragraph shares one made-up word with the next only."""
    rng = np.random.default_rng(seed)
    for d in range(n_docs):
        vecs = 2.0 * rng.standard_normal(dim) + rng.standard_normal((n_par, dim))
        yield (f"linked-{d}", [f"filler words here link{d}x{p} link{d}x{p + 1}" for p in range(n_par)],
               vecs / np.linalg.norm(vecs, axis=1, keepdims=True))


@pytest.fixture(scope="module")
def linked_store(tmp_path_factory):
    store = vector_store(tmp_path_factory.mktemp("linked"), "random16", linked_docs())
    cfg = TrainConfig(phase1_epochs=2, phase2_epochs=4, batch_size=32, lr=3e-3, val_queries=100, n_candidates=30)
    train(store, {"d_model": 32, "n_heads": 2}, cfg, quiet=True, force=True)  # this model, whatever the guard says
    return store


def test_the_model_learns_to_read_shared_words(linked_store):
    with Predictor.open(linked_store) as predictor:
        seq = ParagraphSequences(predictor.store)
        rng = np.random.default_rng(1)
        hits_words, hits_vectors = [], []
        for q in seq.queries("test", 3)[:60]:
            doc = seq.doc_rows[seq.doc_ids[q.target]]
            same_doc = [r for r in doc if r != q.target and r not in q.context]
            others = rng.choice([r for r in range(len(seq)) if r not in doc], 10, replace=False)
            rows = [q.target, *same_doc, *others]
            context, cands = [int(seq.ids[r]) for r in q.context], [int(seq.ids[r]) for r in rows]
            hits_words.append(predictor.rerank(context, cands).order[0] == 0)  # ids: the stored texts are read
            vectors = [predictor.store.vectors([i])[0] for i in cands]
            hits_vectors.append(predictor.rerank(predictor.store.vectors(context), vectors).order[0] == 0)
    assert np.mean(hits_words) > 0.9, np.mean(hits_words)
    assert np.mean(hits_vectors) < 0.5, np.mean(hits_vectors)  # no words: a guess among the document's paragraphs


def test_word_candidates_find_what_the_vectors_miss(tmp_path, monkeypatch):
    """Random vectors (so FAISS finds nothing in particular) and texts in which each paragraph shares one rare word
    with the next: a pipeline with word_candidates has the next paragraph among its candidates, one without rarely.
    Word results found beforehand give the same lists, and training searches each query's words once."""
    from nextpara.attention_core.candidates import word_sources
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.training import Trainer
    from nextpara.store.corpus import Document
    from nextpara.store.store import open_store

    rng = np.random.default_rng(3)
    n_docs, n_par, dim = 30, 10, 16
    words = [f"w{i:04d}" for i in range(n_docs * n_par + 1)]
    docs = [Document(doc_id=f"doc{d}", title="", paragraphs=[
        f"filler text {words[d * n_par + p]} and {words[d * n_par + p + 1]} more filler" for p in range(n_par)])
        for d in range(n_docs)]
    vectors = [rng.standard_normal((n_par, dim)).astype(np.float32) for _ in docs]
    with open_store(tmp_path, embedder_name="random", dim=dim) as store:
        store.add_documents(docs, vectors)
        ids = store.paragraph_table()[0].reshape(n_docs, n_par)
        contexts = [store.vectors(ids[d, 3:6]) for d in range(n_docs)]
        texts = [[p.text for p in store.get_paragraphs(ids[d, 3:6])] for d in range(n_docs)]
        exclude = [set(ids[d, 3:6].tolist()) for d in range(n_docs)]
        found = {}
        for n_words in (0, 3):
            model = NextParagraphModel(RerankerConfig(embed_dim=dim, lexical=False, word_candidates=n_words))
            cands, _ = RerankPipeline(model, store, n_candidates=5).candidates(contexts, exclude, context_texts=texts)
            found[n_words] = np.mean([ids[d, 6] in c for d, c in enumerate(cands)])
        # the word results found beforehand (as training keeps them across epochs) give the same lists
        found_words = word_sources(store, texts, 3, exclude)
        again, _ = RerankPipeline(model, store, n_candidates=5).candidates(contexts, exclude, words=found_words)
        assert [c.tolist() for c in again] == [c.tolist() for c in cands]
        # training mines with them too: the same lists in every epoch, each query's words searched once
        trainer = Trainer(store, ParagraphSequences(store), model.cfg, TrainConfig(batch_size=8, val_queries=10),
                          quiet=True)
        searches = count_word_searches(store, monkeypatch)  # the real search, its calls counted
        first = trainer.mine(trainer.train_q)
        assert searches == [len(trainer.train_q)] * 2  # the last paragraph's words and the context's, for every query
        second = trainer.mine(trainer.train_q)
        assert len(searches) == 2  # none again
        monkeypatch.undo()
        fresh = RerankPipeline(trainer.model, store, trainer.cfg.n_candidates).candidates(
            [trainer.seq.vectors[q.context] for q in trainer.train_q],
            [set(trainer.seq.ids[trainer.seq.same_text_rows(q.context)].tolist()) for q in trainer.train_q],
            context_texts=[[trainer.texts[r] for r in q.context] for q in trainer.train_q])[0]
        assert len(trainer._word_lists) == len({tuple(q.context.tolist()) for q in trainer.train_q}) > 0
        assert [trainer.seq.ids[rows].tolist() for rows in first] == [c.tolist() for c in fresh]
        assert [r.tolist() for r in first] == [r.tolist() for r in second]
    assert found[3] == 1.0 and found[0] < 0.2, found


def test_a_replica_behind_its_writer_answers_from_what_it_holds(tmp_path):
    """A read-only replica's SQLite (and word index) already shows what its writer added or deleted after the
    replica loaded its vectors: retrieval answers from the paragraphs the replica holds, without an error."""
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.store.corpus import Document
    from nextpara.store.store import open_store

    rng = np.random.default_rng(4)
    dim = 16

    def docs(prefix, n):
        return [Document(doc_id=f"{prefix}{d}", title="", paragraphs=[f"shared topic {prefix}{d} part {p}" for p in range(4)])
                for d in range(n)], [rng.standard_normal((4, dim)).astype(np.float32) for _ in range(n)]

    writer = open_store(tmp_path, embedder_name="random", dim=dim)
    writer.add_documents(*docs("old", 5))
    writer.snapshot()
    with open_store(tmp_path, readonly=True) as replica:
        ctx_ids = replica.ids_of_documents(["old0"])[:2]
        texts = [p.text for p in replica.get_paragraphs(ctx_ids)]
        pipelines = [RerankPipeline(NextParagraphModel(RerankerConfig(embed_dim=dim, lexical=lexical_model,
                                                                      word_candidates=10)), replica, n_candidates=10)
                     for lexical_model in (True, False)]

        def ask(pipeline):
            return pipeline.retrieve([replica.vectors(ctx_ids)], [set(ctx_ids.tolist())], [texts], keep=5)[0]

        for pipeline in pipelines:  # warm: the word-reading model caches every candidate's row, old1's included
            ask(pipeline)
        writer.add_documents(*docs("new", 5))
        writer.delete_documents(["old1"])
        for pipeline in pipelines:
            scored = ask(pipeline)
            assert len(scored.paragraphs) == 5  # the deleted paragraphs leave no hole in the answer
            held = set(replica.find_paragraphs(scored.ids).keys())
            assert len(scored.ids) and set(scored.ids[:5].tolist()) <= held
            assert [p.id for p in scored.paragraphs] == scored.ids[:len(scored.paragraphs)].tolist()
            assert not set(writer.ids_of_documents([f"new{d}" for d in range(5)]).tolist()) & set(scored.ids.tolist())
    writer.close()


def test_document_frequencies_count_each_text_once_per_bucket():
    """The fit's fast count (each distinct word hashed once) equals its definition, token_counts' buckets of each text
    counted once, also where two words of one text share a bucket."""
    seen: dict[int, str] = {}
    word = 0
    while True:  # two words in one bucket: some pair among a few thousand, by the birthday bound
        w = f"w{word}"
        b = int(lexical.token_counts(w)[0][0])
        if b in seen:
            break
        seen[b], word = w, word + 1
    pair = f"{seen[b]} {w}"
    texts = [pair, f"{pair} {pair}", "Alpha alpha ALPHA beta", "Ünïcode naïve café, CAFÉ!", "", "a b c", "beta x_y 42 42"]
    by_definition = np.zeros(lexical.N_BUCKETS, np.int64)
    for text in texts:
        by_definition[lexical.token_counts(text)[0]] += 1
    got = lexical.document_frequencies(texts)
    np.testing.assert_array_equal(got, by_definition)
    # the bounded-memory paths (words forgotten, buckets added up as it goes) count the same
    np.testing.assert_array_equal(lexical.document_frequencies(texts, words_kept=2), by_definition)
    assert got[b] == 2 and got.sum() == by_definition.sum() > 0


def test_a_batch_of_queries_gets_each_query_its_own_features():
    """features_many fills one bucket table per query in turn: nothing of one query's context may leak into another
    query's features, and a query without words gets zeros."""
    lx = lexical.Lexicon.fit(["alpha beta", "gamma delta", "epsilon alpha", "zeta"])
    contexts = [lx.matrix(["alpha beta", "gamma"]), None, lx.matrix(["zeta delta"]), lx.matrix(["epsilon"])]
    texts = [["gamma alpha", "zeta"], ["alpha"], ["delta", "alpha zeta", None], [None, None]]
    sizes = [len(t) for t in texts]
    candidates = [lx.matrix(t) for t in texts]
    batch = lexical.features_many(contexts, lx.matrix([t for ts in texts for t in ts]), sizes, 4)
    assert [b.shape for b in batch] == [(k, lexical.n_features(4)) for k in sizes]
    for q in (0, 2):  # alone, the same numbers
        np.testing.assert_allclose(batch[q], lexical.features(contexts[q], candidates[q], 4), rtol=1e-6)
    assert not batch[1].any() and not batch[3].any()
    assert batch[0][1, 3] == 0 and batch[2][1, 3] > 0  # "zeta" matches only the context that has it


def reference_features(context, candidates, L, novel, seam=None):
    """features() written out densely for one query: the definitions of the module docstring, nothing shared with it.
    ``seam``: the query's seam row (1 x buckets), for the last column."""
    out = np.zeros((candidates.shape[0], lexical.n_features(L, novel, seam is not None)), np.float32)
    if context is None or context[-L:].nnz == 0:
        return out
    ctx, cand = context[-L:].toarray(), candidates.toarray()
    has_words = cand.any(1)
    out[:, L - len(ctx):L] = cand @ ctx.T
    whole = ctx.sum(0)
    out[:, L] = cand @ (whole / np.linalg.norm(whole))
    out[:, L + 1] = has_words
    if novel:
        added = np.where(ctx[:-1].any(0), 0.0, ctx[-1])
        if added.any():
            out[:, L + 2] = cand @ (added / np.linalg.norm(added))
        out[:, L + 3] = np.where(has_words, 1.0 - (cand ** 2 * ctx.any(0)).sum(1), 0.0)
    if seam is not None:
        out[:, -1] = np.where(has_words, cand @ seam.toarray()[0], 0.0)
    return out


def test_features_many_equals_the_dense_definition_on_random_batches():
    """The batched gather (one table for the batch, a binary search per candidate word) against the dense reference,
    on random batches: contexts longer and shorter than L, queries without context or without candidates, texts
    without words, novel and the seam feature on and off (a seam row without words, or with words the context lacks);
    contexts given as CSR matrices and as lists of rows."""
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(60)]
    lx = lexical.Lexicon.fit([" ".join(rng.choice(vocab, 12)) for _ in range(50)])

    def text():
        n = int(rng.integers(0, 8))
        return " ".join(rng.choice(vocab, n)) if n else None

    for _ in range(60):
        contexts, candidates = [], []
        for _ in range(int(rng.integers(1, 6))):
            contexts.append(None if rng.random() < 0.2 else lx.matrix([text() for _ in range(int(rng.integers(1, 10)))]))
            candidates.append(lx.matrix([text() for _ in range(int(rng.integers(0, 7)))]))
        L, novel = int(rng.integers(1, 9)), bool(rng.integers(2))
        seam = lx.matrix([text() for _ in contexts]) if rng.random() < 0.5 else None
        got = lexical.features_many(contexts, lexical.stack([(m[i].indices, m[i].data) for m in candidates
                                                             for i in range(m.shape[0])]),
                                    [m.shape[0] for m in candidates], L, novel, seam=seam)
        for q, (ctx, cand, g) in enumerate(zip(contexts, candidates, got)):
            np.testing.assert_allclose(g, reference_features(ctx, cand, L, novel, None if seam is None else seam[q]),
                                       atol=1e-5)
        as_rows = [None if m is None else [(m[i].indices, m[i].data) for i in range(m.shape[0])] for m in contexts]
        for g, r in zip(got, lexical.features_many(as_rows, lexical.stack([(m[i].indices, m[i].data) for m in candidates
                                                                          for i in range(m.shape[0])]),
                                                   [m.shape[0] for m in candidates], L, novel, seam=seam)):
            np.testing.assert_array_equal(r, g)  # contexts as lists of rows, as the pipeline gives them: the same


def test_stored_rows_come_back_in_order_read_once_and_the_oldest_half_goes_past_the_limit():
    """Word rows of stored paragraphs by id (word_rows.StoredWordRows): any order, duplicates, an id whose text is gone
    (an empty row, not found, not kept); a text read once; past the limit, the newest half kept, and a call whose own
    row is the oldest, dropped by the put it makes, still gets it."""
    lx = lexical.Lexicon.fit(["alpha beta", "gamma delta", "epsilon"])
    texts = {10: "alpha beta", 3: "gamma gamma delta", 7: "epsilon alpha", 12: "beta", 5: "delta", 1: "alpha"}
    reads: list[list[int]] = []

    def read(ids):
        reads.append(ids)
        return {i: texts[i] for i in ids if i in texts}

    def want(ids):
        return lexical.stack([lx.weigh(texts[i]) if i in texts else lexical.EMPTY_ROW for i in ids]).toarray()

    rows = StoredWordRows(lx.weigh, lexical.N_BUCKETS, limit=4)
    got, found = rows.rows(np.array([99, 98], np.int64), read)  # nothing kept yet, and nothing to keep
    assert got.nnz == 0 and got.shape[0] == 2 and not found.any() and len(rows) == 0
    asked = [7, 3, 99, 7, 10]
    got, found = rows.rows(np.array(asked, np.int64), read)
    assert reads[-1] == [3, 7, 10, 99] and found.tolist() == [True, True, False, True, True]
    np.testing.assert_array_equal(got.toarray(), want(asked))
    assert rows.uncached(np.array([3, 99, 12], np.int64)).tolist() == [99, 12]
    n_reads = len(reads)
    rows.rows(np.array([10, 3], np.int64), read)
    assert len(reads) == n_reads  # all kept: nothing read
    rows.rows(np.array([1], np.int64), read)  # 4 rows kept: 3, 7, 10 (put first) and 1
    got, found = rows.rows(np.array([12, 3, 10, 7], np.int64), read)  # 12 makes 5: the put keeps the newest 2, 1 and
    assert reads[-1] == [12] and found.all()  # one of the first three, then adds 12; the others come from the index
    np.testing.assert_array_equal(got.toarray(), want([12, 3, 10, 7]))  # read before the put
    assert len(rows) == 3 and rows.uncached(np.array([1, 12], np.int64)).tolist() == []
    assert len(rows.uncached(np.array([3, 7, 10], np.int64))) == 2


def test_stored_rows_keep_a_row_another_thread_put_while_the_call_read_it():
    """A call reads a text another thread puts meanwhile; its own put, past the limit, compacts: the row it read is
    kept through the compaction (the other thread's put keeps it as it is) and the call gets it."""
    lx = lexical.Lexicon.fit(["alpha beta", "gamma delta", "epsilon"])
    texts = {1: "alpha", 2: "beta", 3: "gamma", 5: "delta epsilon", 6: "alpha gamma"}
    rows = StoredWordRows(lx.weigh, lexical.N_BUCKETS, limit=4)

    def read(ids):  # while this call reads, others put 1, 2 and 5, then 3: 5 is among the oldest now
        rows.rows(np.array([1, 2, 5], np.int64), lambda missing: {i: texts[i] for i in missing})
        rows.rows(np.array([3], np.int64), lambda missing: {i: texts[i] for i in missing})
        return {i: texts[i] for i in ids}

    got, found = rows.rows(np.array([5, 6, 5], np.int64), read)
    assert found.all()
    np.testing.assert_array_equal(got.toarray(), lexical.stack([lx.weigh(texts[i]) for i in (5, 6, 5)]).toarray())
