"""The in-process Predictor on a real store with a trained model."""

import copy

import numpy as np
import pytest
from conftest import run_cli, unit_vectors
from nextpara.attention_core.predictor import Predictor
from nextpara.attention_core.served import describe_served
from nextpara.errors import InvalidInputError, NotFoundError
from nextpara.store.corpus import Document
from nextpara.store.store import open_store


@pytest.fixture(scope="module")
def predictor(trained_store):
    p = Predictor.open(trained_store)
    yield p
    p.close()


def doc_ids_in_order(store, doc_id):
    ids, docs, positions, _ = store.paragraph_table()
    return [int(i) for i, d in zip(ids, docs) if d == doc_id]


def test_predictions_never_include_the_context(predictor):
    store = predictor.store
    ids, docs, _, _ = store.paragraph_table()
    doc = docs[len(docs) // 2]
    rows = doc_ids_in_order(store, doc)
    for end in range(1, min(len(rows), 6)):
        context_ids = rows[max(0, end - 4):end]
        texts = [p.text for p in store.get_paragraphs(context_ids)]
        same_text = set(store.ids_with_text(texts).tolist())
        for context in (context_ids, texts, [texts[0], *context_ids[1:]]):
            result = predictor.predict_next(context, top_k=50)
            got = {p.paragraph_id for p in result.predictions}
            assert len(result.predictions) == 50
            assert not got & (set(context_ids) | same_text), (context, got & same_text)
            assert not {p.text for p in result.predictions} & set(texts)
            scores = [p.score for p in result.predictions]
            assert scores == sorted(scores, reverse=True)
        assert result.model_version == predictor.model_version and result.index_version == store.generation


def test_text_id_and_vector_contexts_agree(predictor):
    store = predictor.store
    ids = [int(i) for i in store.paragraph_table()[0][10:13]]
    texts = [p.text for p in store.get_paragraphs(ids)]
    vectors = [v.tolist() for v in store.vectors(ids)]
    by_id = predictor.predict_next(ids, top_k=5)
    by_text = predictor.predict_next(texts, top_k=5)
    by_vector = predictor.predict_next(vectors, top_k=5, exclude_doc_ids=[])
    assert [p.paragraph_id for p in by_id.predictions] == [p.paragraph_id for p in by_text.predictions]
    # the ids' word rows are the ones kept by id, the texts' are weighed from the texts: the same rows, the same scores
    assert [p.score for p in by_id.predictions] == pytest.approx([p.score for p in by_text.predictions], abs=1e-5)
    # vectors carry no text: the stored paragraphs with those vectors are excluded, as the ids are, and the model
    # scores them without word overlap, so they rank as the ids do when the words are hidden
    blind = copy.copy(predictor)
    blind.pipeline = copy.copy(predictor.pipeline)
    blind.pipeline.lexicon = None
    by_id_without_words = blind.predict_next(ids, top_k=5)
    vector_ids = [p.paragraph_id for p in by_vector.predictions]
    assert not set(vector_ids) & set(ids)
    assert vector_ids[:3] == [p.paragraph_id for p in by_id_without_words.predictions][:3]


def test_top_k_beyond_the_candidate_depth_is_filled(predictor):
    store = predictor.store
    ids = [int(i) for i in store.paragraph_table()[0][10:13]]
    deep = 3 * predictor.pipeline.n_candidates  # more than the two vector sources' usual union can hold
    assert store.count_paragraphs() > deep + 50
    for context in (ids, [v.tolist() for v in store.vectors(ids)]):
        got = [p.paragraph_id for p in predictor.predict_next(context, top_k=deep).predictions]
        assert len(got) == len(set(got)) == deep and not set(got) & set(ids)
    # a context's answer does not depend on another's top_k in its batch (the scores are read against the list)
    other = [int(i) for i in store.paragraph_table()[0][40:43]]
    alone = predictor.predict_next(other, top_k=5).predictions
    batched = predictor.predict_next_batch([other, ids], [5, deep])[0].predictions
    assert [(p.paragraph_id, p.score) for p in batched] == [(p.paragraph_id, p.score) for p in alone]


def test_attention_weights_and_truncation(predictor):
    ids = [int(i) for i in predictor.store.paragraph_table()[0][:12]]
    result = predictor.predict_next(ids[:3], top_k=2, include_attention=True)
    att = np.asarray(result.attention)
    assert att.shape == (4, 3) and np.allclose(att.sum(1), 1.0, atol=1e-5)
    long = predictor.predict_next(ids, top_k=2)
    assert (long.context_used, long.context_dropped) == (predictor.max_context, 12 - predictor.max_context)


def test_rerank_given_candidates(predictor):
    store = predictor.store
    ids = [int(i) for i in store.paragraph_table()[0][:40]]
    context, cands = ids[:3], ids[3:20]
    result = predictor.rerank(context, cands)
    assert sorted(result.order) == list(range(len(cands)))
    assert result.scores == sorted(result.scores, reverse=True)
    # the same list given as texts and ids scores the same (scores depend on the whole list); a raw vector has
    # no text, so with word-overlap features only its own score may differ
    mixed = [store.get_paragraphs([cands[0]])[0].text, cands[1], store.vectors([cands[2]])[0], *cands[3:]]
    mixed_result = predictor.rerank(context, mixed)
    direct = dict(zip(result.order, result.scores))
    got = dict(zip(mixed_result.order, mixed_result.scores))
    same = [i for i in range(len(cands)) if i != 2 or not predictor.pipeline.model.cfg.lexical]
    np.testing.assert_allclose([got[i] for i in same], [direct[i] for i in same], atol=1e-3)
    # the batch form answers each pair as the single call does
    batch = predictor.rerank_batch([context, ids[20:23]], [cands, ids[23:40]])
    assert batch[0].order == result.order and batch[1].order == predictor.rerank(ids[20:23], ids[23:40]).order


@pytest.mark.parametrize("context, error, message", [
    ([], InvalidInputError, "context is empty"),
    (["fine", "  "], InvalidInputError, r"context\[1\]: empty text"),
    ([1, 10**12], NotFoundError, r"context\[1\]: unknown paragraph id 1000000000000"),
    ([[0.5] * 7], InvalidInputError, r"context\[0\]: vector of dimension 7, .* has dimension 384"),
    ([[float("nan")] * 384], InvalidInputError, "NaN"),
    ([[0.0] * 384], InvalidInputError, "all zeros"),
    ([{"text": "x"}], InvalidInputError, "expected a text, a paragraph id or a vector"),
    ("just a string", InvalidInputError, "must be a list"),
])
def test_bad_context_is_a_clear_error(predictor, context, error, message):
    with pytest.raises(error, match=message):
        predictor.predict_next(context)


def test_lists_of_one_kind_resolve_as_mixed_lists_do(predictor):
    """A list of ids only, or of vectors only (lists of numbers, or a 2-d array as a Parquet row gives), takes a
    path without per-item checks: the same vectors, the same scores, and an error still names its item's place in
    the list as given (before the oldest are dropped)."""
    store = predictor.store
    ids = [int(i) for i in store.paragraph_table()[0][:30]]
    vectors = store.vectors(ids)
    by_id = predictor.rerank_batch([ids[:10]], [ids[10:]])[0]
    mixed = predictor.rerank_batch([[np.int64(ids[0]), *ids[1:10]]], [[np.int64(ids[10]), *ids[11:]]])[0]
    assert by_id.order == mixed.order and by_id.scores == mixed.scores
    as_lists = predictor.rerank_batch([vectors[:10].tolist()], [vectors[10:].tolist()])[0]
    as_array = predictor.rerank_batch([vectors[:10]], [vectors[10:]])[0]
    one_by_one = predictor.rerank_batch([vectors[:10].tolist()], [[*vectors[10:29].tolist(), vectors[29]]])[0]
    assert as_lists.order == as_array.order == one_by_one.order
    np.testing.assert_allclose(as_lists.scores, one_by_one.scores, atol=1e-6)
    bad = vectors[:10].copy()
    bad[9, 0] = np.nan
    for context in (bad, bad.tolist()):
        with pytest.raises(InvalidInputError, match=r"context\[9\]: vector has a NaN"):
            predictor.predict_next(context)  # 10 items, of which the model reads the last 8
    with pytest.raises(NotFoundError, match=r"candidates\[2\]: unknown paragraph id 99999999 \(1 more unknown\)"):
        predictor.rerank(ids[:3], [ids[3], ids[4], 99999999, 10**30])
    with pytest.raises(NotFoundError, match=r"context\[1\]: unknown paragraph id 1000000000000000000000000000000"):
        predictor.rerank([ids[0], 10**30], ids[3:5])


@pytest.mark.parametrize("top_k", [0, -1, 1001, 2.5, True])
def test_bad_top_k(predictor, top_k):
    with pytest.raises(InvalidInputError, match="top_k must be an integer from 1 to 1000"):
        predictor.predict_next([1], top_k=top_k)


def test_a_store_no_model_fits_is_served_by_plain_cosine(tmp_path):
    vecs = unit_vectors(6, 4, seed=2)
    with open_store(tmp_path, embedder_name="e", dim=4) as store:  # 4-d vectors: the general model is for MiniLM's
        store.add_documents([Document("d", [f"p{i}" for i in range(6)])], [vecs])
    with Predictor.open(tmp_path) as predictor:
        assert predictor.meta["source"] == "cosine" and "no model of its own, and the general model is for" in predictor.meta["line"]
        ids = [int(i) for i in predictor.store.paragraph_table()[0]]
        result = predictor.predict_next([ids[4]], top_k=3)  # B1: cosine to the last paragraph, the context excluded
        expected = [ids[j] for j in np.argsort(-(vecs @ vecs[4]), kind="stable") if j != 4][:3]
        assert [p.paragraph_id for p in result.predictions] == expected
    with open_store(tmp_path, readonly=True) as store:  # and `nextpara info` / GetInfo say so, with the same version
        described = describe_served(store)
    assert (described["source"], described["model_version"]) == ("cosine", result.model_version)
    info = run_cli("info", "--data-dir", str(tmp_path)).stdout
    assert f"plain cosine to the last paragraph (B1), {result.model_version}\nwhy           no model of its own" in info


def test_a_request_reads_each_stored_row_once(trained_store):
    """PredictNext by stored ids: each paragraph row is read from SQLite at most once per request (the context's
    texts, then every candidate's row, whose text feeds the word features and whose place makes the answer), and a
    later request reads only its context's and its answer's rows: the candidates' word rows are cached by id."""
    import re

    def reads(predictor, contexts):
        statements: list[str] = []
        db = predictor.store.tables.db
        db.set_trace_callback(statements.append)
        try:
            result = predictor.predict_next_batch(contexts, top_k=10)
        finally:
            db.set_trace_callback(None)
        rows = [s for s in statements if re.match(r"SELECT id, doc_id, position, text, text_hash FROM paragraphs", s)]
        read_ids = [int(i) for s in rows for i in re.search(r"IN \(([^)]*)\)", s).group(1).split(",")]
        assert len(read_ids) == len(set(read_ids)), "a paragraph row was read twice"
        assert len(statements) <= 6, statements  # context rows, same-text ids, generation, candidate rows (+ chunks)
        return set(read_ids), {p.paragraph_id for r in result for p in r.predictions}

    with Predictor.open(trained_store) as predictor:  # its own, cold cache
        ids = [int(i) for i in predictor.store.paragraph_table()[0][20:24]]
        first, answered = reads(predictor, [ids, ids[1:]])
        assert set(ids) | answered <= first and len(first) > 50  # every candidate's text, once
        again, answered = reads(predictor, [ids, ids[1:]])
        # the context's rows and the answer's, not every candidate's
        assert set(ids) | answered <= again and len(again - set(ids)) <= 2 * 10 < len(first)
    with Predictor.open(trained_store) as predictor:  # warmed as a server warms it once it has loaded
        assert predictor.pipeline.warm_word_rows() == predictor.store.count_paragraphs()
        others = [int(i) for i in predictor.store.paragraph_table()[0][40:44]]
        weighed: list[str] = []
        weigh = predictor.pipeline.lexicon.weigh
        predictor.pipeline.lexicon.weigh = lambda text: weighed.append(text) or weigh(text)
        first, answered = reads(predictor, [others])
        assert first == set(others) | answered  # the first request already reads no candidate's text
        assert weighed == []  # ... and weighs none, its context's included: their rows are kept by id


def test_reranking_stored_ids_looks_up_no_copies_of_their_texts(trained_store):
    """Rerank searches nothing, so it needs no exclusions: the texts' copies (a lookup by text hash of every item, which
    retrieval needs to exclude them) are not looked up; the stored rows are read once (for their words), a second call
    reads nothing from the paragraphs table (vectors from memory, word rows from the cache by id; a read-only store
    checks the ids in SQLite only once its writer has written since it loaded:
    test_a_replica_reranks_a_paragraph_its_writer_deleted_as_unknown), and the scores are those of the same paragraphs
    given as texts."""
    import re

    with Predictor.open(trained_store) as predictor:
        ids = [int(i) for i in predictor.store.paragraph_table()[0][30:60]]

        def traced_rerank():  # the result and the SQL statements it ran
            statements: list[str] = []
            db = predictor.store.tables.db
            db.set_trace_callback(statements.append)
            try:
                return predictor.rerank_batch([ids[:4]], [ids[4:]])[0], statements
            finally:
                db.set_trace_callback(None)

        by_id, statements = traced_rerank()
        assert not [s for s in statements if "text_hash IN" in s], statements
        read = [int(i) for s in statements if "FROM paragraphs WHERE id IN" in s
                for i in re.search(r"IN \(([^)]*)\)", s).group(1).split(",")]
        assert sorted(read) == sorted(ids), statements  # each row once: the context's and the candidates'
        again, statements = traced_rerank()  # no text read, and no id checked: no writer has written since the load
        assert not [s for s in statements if "FROM paragraphs" in s], statements
        assert again.order == by_id.order and again.scores == by_id.scores
        texts = {p.id: p.text for p in predictor.store.get_paragraphs(ids)}
        by_text = predictor.rerank_batch([[texts[i] for i in ids[:4]]], [[texts[i] for i in ids[4:]]])[0]
        score_of = lambda r: dict(zip(r.order, r.scores))  # noqa: E731
        assert score_of(by_text).keys() == score_of(by_id).keys() == set(range(len(ids) - 4))
        np.testing.assert_allclose([score_of(by_text)[k] for k in range(26)], [score_of(by_id)[k] for k in range(26)],
                                   atol=1e-3)


def test_a_growing_document_embeds_only_its_new_paragraph(trained_store):
    """A writing tool sends its last four paragraphs, one further each call: the three it sent before come from the
    embedding cache (keyed by the text's hash), and only the new one reaches the model."""
    p = Predictor.open(trained_store)
    try:
        embedded: list[int] = []
        embed = p._embed.embed_fn
        p._embed.embed_fn = lambda texts: (embedded.append(len(texts)), embed(texts))[1]  # counts, then embeds
        store = p.store
        ids, docs, _, _ = store.paragraph_table()
        rows = doc_ids_in_order(store, docs[0])[:7]
        texts = [q.text for q in store.get_paragraphs(rows)]
        first = p.predict_next(texts[0:4])
        for end in range(5, 8):
            p.predict_next(texts[end - 4:end])
        new = [t for i, t in enumerate(texts[4:7], start=4) if t not in texts[:i]]  # a repeated paragraph is cached
        assert embedded == [len(set(texts[0:4]))] + [1] * len(new)
        again = p.predict_next(texts[0:4])  # cached vectors give the same answer as embedded ones
        assert [x.paragraph_id for x in again.predictions] == [x.paragraph_id for x in first.predictions]
    finally:
        p.close()


def test_an_answer_paragraph_deleted_since_its_search_gives_its_place_to_the_next(trained_store, tmp_path):
    """A read-only replica may rank a paragraph its writer has deleted since the replica loaded its index: the answer
    leaves it out and shows the next one, reading rows only for what it shows."""
    import re
    import shutil

    from nextpara.attention_core.pipeline import Scored

    shutil.copytree(trained_store, tmp_path / "store")
    with Predictor.open(tmp_path / "store", readonly=False) as predictor:
        store = predictor.store
        ids, docs, _, _ = store.paragraph_table()
        firsts = {}
        for i, d in zip(ids, docs):
            firsts.setdefault(d, []).append(int(i))
        a, b, c, d = list(firsts.values())[:4]
        ranking = np.array([a[0], b[0], b[1], c[0], d[0], d[1]])
        store.delete_documents([docs[list(ids).index(b[0])]])
        def answer(scored: list, keep: int) -> set[int]:
            """_answer_rows on ``scored``; the paragraph ids it asked SQLite for."""
            asked: list[int] = []
            db = store.tables.db
            db.set_trace_callback(lambda sql: asked.extend(int(i) for i in re.findall(r"\d+", sql.split(" IN ", 1)[1]))
                                  if "FROM paragraphs" in sql and " IN " in sql else None)
            try:
                predictor.pipeline._answer_rows(scored, keep, {})
            finally:
                db.set_trace_callback(None)
            return set(asked)

        scored = [Scored(ids=ranking.copy(), scores=np.arange(6.0)[::-1], retrieval_scores=np.zeros(6)),
                  Scored(ids=ranking[3:].copy(), scores=np.arange(3.0)[::-1], retrieval_scores=np.zeros(3))]
        answer(scored, 3)
        assert [p.id for p in scored[0].paragraphs] == [a[0], c[0], d[0]]
        assert list(scored[0].ids) == [a[0], c[0], d[0], d[1]] and list(scored[0].scores) == [5.0, 2.0, 1.0, 0.0]
        assert [p.id for p in scored[1].paragraphs] == [c[0], d[0], d[1]]
        scored = [Scored(ids=ranking.copy(), scores=np.arange(6.0)[::-1], retrieval_scores=np.zeros(6))]
        asked = answer(scored, 2)
        assert [p.id for p in scored[0].paragraphs] == [a[0], c[0]]
        # the rows shown (and at most the gone ones they replace), never the ones below them
        assert {a[0], c[0]} <= asked <= {a[0], b[0], b[1], c[0]}


def test_a_replica_reranks_a_paragraph_its_writer_deleted_as_unknown(trained_store, tmp_path):
    """Reranking by id reads a row's text from SQLite only for a word row not cached yet, and on a replica checks the
    other ids there: a paragraph the writer has deleted since the replica loaded its index is unknown (NOT_FOUND),
    as it is to predict_next, whether its word row was cached or not."""
    import shutil

    shutil.copytree(trained_store, tmp_path / "store")
    with Predictor.open(tmp_path / "store", readonly=True) as replica:
        ids, docs, _, _ = replica.store.paragraph_table()
        gone_doc = docs[0]
        gone = [int(i) for i, d in zip(ids, docs) if d == gone_doc]
        kept = [int(i) for i, d in zip(ids, docs) if d != gone_doc][:12]
        replica.rerank(kept[:4], [gone[1], kept[5]])  # gone[1]'s word row is cached now
        with open_store(tmp_path / "store") as writer:
            writer.delete_documents([gone_doc])
        with pytest.raises(NotFoundError, match=rf"candidates\[1\]: unknown paragraph id {gone[0]}"):
            replica.rerank(kept[:4], [kept[5], gone[0], kept[6]])
        with pytest.raises(NotFoundError, match=rf"context\[1\]: unknown paragraph id {gone[0]}"):
            replica.rerank([kept[0], gone[0]], kept[5:9])
        with pytest.raises(NotFoundError, match=rf"candidates\[0\]: unknown paragraph id {gone[1]}"):
            replica.rerank(kept[:4], [gone[1], kept[5]])
        assert sorted(replica.rerank(kept[:4], kept[5:9]).order) == [0, 1, 2, 3]


def test_a_replica_asked_for_a_paragraph_written_since_it_loaded_says_it_is_behind(trained_store, tmp_path):
    """GetParagraphs on a replica reads SQLite and returned a paragraph its writer had just added, while PredictNext by
    that id said it was unknown (NOT_FOUND): it is INDEX_BEHIND, as min_index_version would say."""
    import shutil

    from nextpara.errors import IndexBehindError

    shutil.copytree(trained_store, tmp_path / "store")
    with Predictor.open(tmp_path / "store", readonly=True) as replica:
        loaded = replica.store.index_generation
        first = int(replica.store.paragraph_table()[0][0])
        with open_store(tmp_path / "store") as writer:
            writer.add_documents([Document(doc_id="late", title="", paragraphs=["Added after the replica loaded."])],
                                 [writer.vectors([first])])
            new = writer.get_document("late")[1][0].id
        assert replica.store.index_generation == loaded and replica.store.find_paragraphs([new]) == {}
        with pytest.raises(IndexBehindError, match=rf"context\[1\]: paragraph id {new} was written after this replica "
                                                   rf"loaded its index \(generation {loaded}\)"):
            replica.predict_next([first, new])
        with pytest.raises(IndexBehindError, match=r"candidates\[0\]"):
            replica.rerank([first], [new, first + 1])
        with pytest.raises(IndexBehindError, match=rf"context\[1\]: paragraph id {new} "):  # at its own place
            replica.predict_next([999_999_999, new])
        with pytest.raises(NotFoundError, match="unknown paragraph id 999999999"):  # what no store holds is unknown
            replica.predict_next([first, 999_999_999])
