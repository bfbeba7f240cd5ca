"""The seam read in words (a model's ``seam_feature`` and ``seam_candidates``): where a paragraph's last sentence
ends, the feature's arithmetic by hand, the word index searched by that sentence in stage 1 and in training's mining,
and the same feature whether a context comes as texts or as stored ids whose texts were not read."""

import math

import numpy as np
import pytest
from conftest import count_word_searches
from nextpara.attention_core import lexical
from nextpara.attention_core.model import NextParagraphModel
from nextpara.attention_core.model_config import RerankerConfig


def test_sentences_end_at_a_stop_and_white_space():
    text = 'He asked: "Who is Zotura?" Nobody knew. Then Kalomi (the elder) arrived.'
    assert lexical.first_sentence(text) == 'He asked: "Who is Zotura?'  # a closing quote goes with the break
    assert lexical.last_sentence(text) == "Then Kalomi (the elder) arrived."
    assert lexical.last_sentence("See section 3.2 of the spec for details") == "See section 3.2 of the spec for details"
    assert lexical.last_sentence("One. Two!  ") == "Two!"
    assert lexical.seam_texts([["First. Second one.", "Third. Fourth!"], [], ["x", None]]) == ["Fourth!", None, None]
    assert lexical.last_sentence("A list follows:\n- first item.\n- second item") == "- second item"


def test_the_seam_feature_by_hand():
    """The last column is the cosine to the seam row; the other columns are those without it; a context without words
    gives zeros even where the seam row has some."""
    lx = lexical.Lexicon(np.ones(lexical.N_BUCKETS, np.float32))  # every word weighs 1: rows are plain unit vectors
    last = "gamma delta. Then zeta arrived."
    context = lx.matrix(["alpha beta", last])
    seam = lexical.stack([lx.row(lexical.last_sentence(last))])  # then, zeta, arrived
    candidates = lx.matrix(["zeta was here", "gamma delta", "then zeta arrived", None])
    got = lexical.features(context, candidates, 4, seam=seam)
    assert got.shape == (4, lexical.n_features(4, seam=True)) == (4, 7)
    np.testing.assert_allclose(got[:, :6], lexical.features(context, candidates, 4), rtol=1e-6)
    np.testing.assert_allclose(got[:, 6], [1 / 3, 0, 1, 0], atol=1e-6)
    no_words = lexical.features(lx.matrix([None]), candidates, 4, seam=seam)
    assert not no_words.any()
    with pytest.raises(ValueError, match="2 seam rows for 1 queries"):
        lexical.features(context, candidates, 4, seam=lexical.stack([lx.row("zeta")] * 2))


def seam_docs(n_docs=30, n_par=8):
    """Each paragraph's first sentence shares a made-up word with the previous paragraph's first (the document's thread,
    which the whole last paragraph's words follow back) and its last sentence one with the next paragraph's first."""
    from nextpara.store.corpus import Document

    return [Document(doc_id=f"doc{d}", title="", paragraphs=[
        f"Back to thread{d}x{p // 2} and link{d}x{p}. Some filler sits here. Then came link{d}x{p + 1}."
        for p in range(n_par)]) for d in range(n_docs)]


@pytest.fixture
def seam_store(tmp_path):
    from nextpara.store.store import open_store

    rng = np.random.default_rng(5)
    docs = seam_docs()
    store = open_store(tmp_path, embedder_name="random", dim=16)
    store.add_documents(docs, [rng.standard_normal((len(d.paragraphs), 16)).astype(np.float32) for d in docs])
    yield store
    store.close()


def test_stage_one_searches_the_words_of_the_last_sentence(seam_store, monkeypatch):
    """With seam_candidates the word index's results for the last sentence join the candidates (random vectors find
    nothing in particular); training mines its lists as serving does, searching each query's sentence once, and its
    seam feature is the one serving computes."""
    from nextpara.attention_core.candidates import word_sources
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.training import Trainer

    store = seam_store
    ids = store.paragraph_table()[0].reshape(30, 8)
    contexts = [store.vectors(ids[d, 2:5]) for d in range(30)]
    texts = [[p.text for p in store.get_paragraphs(ids[d, 2:5])] for d in range(30)]
    exclude = [set(ids[d, 2:5].tolist()) for d in range(30)]
    seam_lists = word_sources(store, texts, 0, exclude, n_seam=2)
    assert [len(row) for row in seam_lists] == [1] * 30  # one source: the seam's
    assert [row[0][0] for row in seam_lists] == ids[:, 5].tolist()  # the next paragraph first, every time
    assert word_sources(store, texts, 2, exclude, n_seam=2)[0][2] == seam_lists[0][0]  # after the other two
    found = {}
    for n_seam in (0, 2):
        model = NextParagraphModel(RerankerConfig(embed_dim=16, lexical=False, seam_candidates=n_seam))
        cands, _ = RerankPipeline(model, store, n_candidates=3).candidates(contexts, exclude, context_texts=texts)
        found[n_seam] = np.mean([ids[d, 5] in c for d, c in enumerate(cands)])
    assert found[2] == 1.0 and found[0] < 0.2, found
    cfg = RerankerConfig(embed_dim=16, seam_feature=True, seam_candidates=2)
    trainer = Trainer(store, ParagraphSequences(store), cfg, TrainConfig(batch_size=8, val_queries=10), quiet=True)
    searches = count_word_searches(store, monkeypatch)  # the real search, its calls counted
    first = trainer.mine(trainer.train_q)
    assert searches == [len(trainer.train_q)]  # the last sentence's words, for every query
    assert [r.tolist() for r in trainer.mine(trainer.train_q)] == [r.tolist() for r in first] and len(searches) == 1
    monkeypatch.undo()
    seq, queries = trainer.seq, trainer.train_q
    q_texts = [[trainer.texts[r] for r in q.context] for q in queries]
    serving = RerankPipeline(trainer.model, store, trainer.cfg.n_candidates)
    fresh = serving.candidates([seq.vectors[q.context] for q in queries],
                               [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in queries],
                               context_texts=q_texts)[0]
    assert [seq.ids[rows].tolist() for rows in first] == [c.tolist() for c in fresh]
    assert np.mean([q.target in rows for q, rows in zip(queries, first)]) == 1.0  # every target in its list
    trained = trainer._lexical([q.context for q in queries], first, train=False)
    served = serving.lexical_features(q_texts, [[trainer.texts[r] for r in rows] for rows in first])
    assert all(f.shape[1] == cfg.n_word_features for f in served)
    for a, b in zip(trained, served):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert max(f[:, -1].max() for f in served) > 0  # the seam column is not all zeros


def test_a_context_by_stored_ids_gets_the_seam_its_texts_give(seam_store):
    """Rerank by ids reads no text whose word row is kept: the seam row is read from the store for the last item, and
    the features equal those of the same context given as texts."""
    from nextpara.attention_core.pipeline import RerankPipeline

    store = seam_store
    model = NextParagraphModel(RerankerConfig(embed_dim=16, seam_feature=True))
    model.lexicon_idf.fill_(1.0)
    pipeline = RerankPipeline(model, store)
    ids = store.paragraph_table()[0].reshape(30, 8)
    ctx, cands = [ids[d, 1:4] for d in range(3)], [ids[d, 4:8] for d in range(3)]
    by_text = pipeline.lexical_features([[p.text for p in store.get_paragraphs(c)] for c in ctx],
                                        [[p.text for p in store.get_paragraphs(c)] for c in cands])
    pipeline.warm_word_rows()  # every stored row kept: resolving by ids would read no text
    reads, read = [], pipeline.stored_texts

    def counted(ids):
        reads.extend(ids)
        return read(ids)

    pipeline.stored_texts = counted
    by_id = pipeline.lexical_features([[None] * 3] * 3, [[None] * 4] * 3, cands, ctx)
    assert sorted(reads) == sorted(int(c[-1]) for c in ctx)  # the seam rows' texts, once ...
    again = pipeline.lexical_features([[None] * 3] * 3, [[None] * 4] * 3, cands, ctx)
    assert len(reads) == 3  # ... and kept by id: none read again
    for a, b, c in zip(by_text, by_id, again):
        np.testing.assert_allclose(b, a, rtol=1e-6)
        np.testing.assert_array_equal(c, b)
    assert all(f.shape == (4, model.cfg.n_word_features) for f in by_id)
    seam = np.array([f[0, -1] for f in by_id])  # the next paragraph against the seam "Then came link{d}x4."
    # "Then came link{d}x4." (3 words) against the 12 distinct words of "Back to thread{d}x2 and link{d}x4. Some filler
    # sits here. Then came link{d}x5.": then, came and link{d}x4 shared, every weight 1
    np.testing.assert_allclose(seam, 3 / math.sqrt(3 * 12), rtol=1e-5)


def test_a_checkpoint_keeps_the_seam_settings_and_older_ones_load_without_them(tmp_path):
    from nextpara.attention_core.checkpoint import load_checkpoint, save_checkpoint
    from nextpara.attention_core.served import read_checkpoint_meta

    for seam in (False, True):
        model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2, seam_feature=seam,
                                                  seam_candidates=7 if seam else 0))
        path = tmp_path / f"seam_{seam}.safetensors"
        save_checkpoint(path, model, {"embedder": {"name": "e", "dim": 16}})
        written = read_checkpoint_meta(path)["model_config"]
        assert ("seam_feature" in written) is seam and ("seam_candidates" in written) is seam  # older versions load it
        loaded, _ = load_checkpoint(path, "e", 16)
        assert (loaded.cfg.seam_feature, loaded.cfg.seam_candidates) == (seam, 7 if seam else 0)
        assert loaded.cfg.n_word_features == lexical.n_features(loaded.cfg.max_context, seam=seam)
