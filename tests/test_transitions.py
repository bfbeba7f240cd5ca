"""The transition memory (attention_core/transitions.py): the training documents' transitions, and the next vector
they predict for a last context paragraph.

The store here is of brought vectors whose documents walk a chain of topics (each paragraph near its topic's centre,
the next paragraph one topic on): the next paragraph is never near the last one, so cosine to the last paragraph
cannot find it, and only the order of the training documents says where a topic leads."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import run_cli, unit_vectors, vector_store
from nextpara.attention_core.checkpoint import load_checkpoint, save_checkpoint, versions, weights_version
from nextpara.attention_core.general import cosine_model, served_model
from nextpara.attention_core.model_config import GENERAL_MEMORY_BOOST, memory_weight
from nextpara.attention_core.pipeline import RerankPipeline
from nextpara.attention_core.sequences import ParagraphSequences, split_of
from nextpara.attention_core.served import read_checkpoint_meta
from nextpara.attention_core.train_config import TrainConfig
from nextpara.attention_core.train_flow import train
from nextpara.attention_core.training import MEMORY_BOOSTS
from nextpara.attention_core.transitions import CANDIDATES, EXACT_UP_TO, TransitionMemory, document_codes, for_store
from nextpara.store.corpus import Document
from nextpara.store.store import open_store

TOPICS, DIM = 12, 64


def chain_docs(n_docs: int, length: int = 6, seed: int = 0, first: int = 0):
    """(doc_id, paragraphs, vectors) of documents walking the topic chain from a random topic, and the centres."""
    rng = np.random.default_rng(seed)
    centres = unit_vectors(TOPICS, DIM, seed=99)
    docs = []
    for d in range(first, first + n_docs):
        start = int(rng.integers(TOPICS))
        topics = [(start + i) % TOPICS for i in range(length)]
        v = centres[topics] + 0.35 * rng.standard_normal((length, DIM)).astype(np.float32) / np.sqrt(DIM)
        docs.append((f"doc-{d}", [f"Document {d}, paragraph {i}, topic {t}." for i, t in enumerate(topics)],
                     v / np.linalg.norm(v, axis=1, keepdims=True)))
    return docs, centres


@pytest.fixture(scope="module")
def chain_store(tmp_path_factory):
    docs, _ = chain_docs(120)
    return vector_store(tmp_path_factory.mktemp("chain"), "chain", docs)


def test_the_memory_holds_the_training_documents_transitions_only(chain_store):
    store = open_store(chain_store, readonly=True)
    seq = ParagraphSequences(store)
    training = [d for d in seq.doc_rows if split_of(d) == "train"]
    assert 0 < len(training) < len(seq.doc_rows)
    memory = TransitionMemory.from_store(store)
    assert len(memory) == sum(len(seq.doc_rows[d]) - 1 for d in training)
    # a validation document's transition is not remembered: its own last paragraph is no key of the memory
    val = next(rows for d, rows in seq.doc_rows.items() if split_of(d) == "validation")
    sims, _ = memory.index.search(np.ascontiguousarray(seq.vectors[val[:1]]), 1)
    assert sims[0, 0] < 0.999


def test_the_memory_predicts_where_a_topic_leads_which_cosine_to_the_last_paragraph_cannot(chain_store):
    store = open_store(chain_store, readonly=True)
    seq = ParagraphSequences(store)
    queries = seq.queries("validation", 4) + seq.queries("test", 4)
    last = seq.vectors[[q.context[-1] for q in queries]]
    p = TransitionMemory.from_store(store).predict(last)
    targets = seq.vectors[[q.target for q in queries]]
    ahead = np.mean(np.sum(p * targets, axis=1) > np.sum(last * targets, axis=1))
    assert ahead > 0.9, f"the prediction nearer the target than the last paragraph for {ahead:.2f} of queries"
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)


def test_a_model_with_the_memory_ranks_the_next_topic_first_where_cosine_does_not(chain_store):
    """Through the serving path (retrieve: stage 1 and the scores) and the rerank path (score: a given list): the
    cosine model, which ranks as B1 does, with and without the memory. Stage 1 searches 5 deep: the query head's and
    the last paragraph's nearest are of the last paragraph's topic, and only the memory's candidates (its prediction's
    nearest, transitions.CANDIDATES of them) bring the next topic's."""
    store = open_store(chain_store, readonly=True)
    seq = ParagraphSequences(store)
    centres = unit_vectors(TOPICS, DIM, seed=99)

    def topic(v: np.ndarray) -> int:
        return int(np.argmax(centres @ v))

    queries = seq.queries("validation", 4) + seq.queries("test", 4)
    contexts = [seq.vectors[q.context] for q in queries]
    exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in queries]
    given = seq.vectors[seq.split_rows("train")[:200]]
    wanted = [topic(seq.vectors[q.target]) for q in queries]

    def top_is_next_topic(boost: float) -> tuple[float, float]:
        model = cosine_model(DIM)
        model.cfg.memory_boost = boost
        pipeline = RerankPipeline(model, store, n_candidates=5)
        served = pipeline.retrieve(contexts, exclude, [[None] * len(c) for c in contexts])
        assert all(len(s.ids) <= 2 * 5 + (CANDIDATES if boost else 0) for s in served)
        found.append(np.mean([w in {topic(v) for v in store.vectors([int(i) for i in s.ids])}
                              for s, w in zip(served, wanted)]))
        by_retrieve = np.mean([topic(store.vectors([int(s.ids[0])])[0]) == w for s, w in zip(served, wanted)])
        scores, _, _ = pipeline.score(contexts, [given] * len(queries))
        by_score = np.mean([topic(given[np.argmax(s)]) == w for s, w in zip(scores, wanted)])
        return float(by_retrieve), float(by_score)

    found: list[float] = []  # per call: the share of queries whose candidates hold a paragraph of the next topic
    without, with_memory = top_is_next_topic(0.0), top_is_next_topic(50.0)
    assert found[0] < 0.2 and found[1] > 0.95, f"the next topic among the candidates: {found}"
    assert max(without) < 0.2, f"cosine alone: the next topic first for {without} of queries"
    assert min(with_memory) > 0.9, f"with the memory: the next topic first for {with_memory} of queries"


def test_the_memorys_candidates_are_what_training_mines_and_keep_to_exclusions_and_the_filter(chain_store):
    """The candidates the memory brings (its prediction's nearest: the next topic's paragraphs here) are the same
    through retrieve (serving) and candidates() (training's mining); a query's excluded ids and a filter's ``allow``
    hold for them as for every other source; and the prediction is timed as the "memory" stage."""
    store = open_store(chain_store, readonly=True)
    seq = ParagraphSequences(store)
    queries = seq.queries("validation", 4)[:40]
    contexts = [seq.vectors[q.context] for q in queries]
    exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in queries]
    model = cosine_model(DIM)
    plain = RerankPipeline(model, store, n_candidates=5)
    without, _ = plain.candidates(contexts, exclude)
    model = cosine_model(DIM)
    model.cfg.memory_boost = 50.0
    pipeline = RerankPipeline(model, store, n_candidates=5)
    mined, _ = pipeline.candidates(contexts, exclude)
    stages: list[str] = []
    served = pipeline.retrieve(contexts, exclude, [[None] * len(c) for c in contexts],
                               observe=lambda stage, seconds: stages.append(stage))
    assert [sorted(s.ids.tolist()) for s in served] == [sorted(m.tolist()) for m in mined]
    assert stages == ["encode", "memory", "search", "rows", "model", "answer"]
    added = [set(m.tolist()) - set(w.tolist()) for m, w in zip(mined, without)]
    assert all(len(a) >= 10 for a in added), [len(a) for a in added]
    again, _ = pipeline.candidates(contexts, [e | a for e, a in zip(exclude, added)])
    assert not any(set(r.tolist()) & a for r, a in zip(again, added))
    barred = set().union(*added)
    allow = np.asarray(sorted(set(seq.ids.tolist()) - barred), np.int64)
    served = pipeline.retrieve(contexts, exclude, [[None] * len(c) for c in contexts], allow=allow)
    assert not any(set(s.ids.tolist()) & barred for s in served)


def test_every_pipeline_of_a_store_shares_its_memory_and_a_write_remakes_it_in_the_background(tmp_path):
    docs, _ = chain_docs(40)
    store = open_store(vector_store(tmp_path, "chain", docs))
    memory = for_store(store)
    assert for_store(store) is memory
    before = memory.get()
    assert memory.get() is before  # nothing written: the same memory
    more, _ = chain_docs(30, seed=1, first=40)
    added = [d for d in more if split_of(d[0]) == "train"]
    store.add_documents([Document(doc_id=d, paragraphs=p) for d, p, _ in added[:1]], [v for _, _, v in added[:1]])
    inline = memory.get()  # a memory this small is made again by the call that finds the store changed
    assert inline is not before and len(inline) == len(before) + len(added[0][1]) - 1
    before, memory._took = inline, 1.0  # as a large store's memory: made again in the background
    added = added[1:]
    store.add_documents([Document(doc_id=d, paragraphs=p) for d, p, _ in added], [v for _, _, v in added])
    assert memory.get() is before  # the one made before serves while the new one is made
    deadline = time.monotonic() + 30
    while memory.get() is before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(memory.get()) == len(before) + sum(len(p) - 1 for _, p, _ in added)
    store.close()


def test_training_fits_the_memorys_weight_and_the_served_checkpoint_keeps_it(tmp_path):
    """Where only the training documents' order tells the next paragraph, training fits a weight above 0 on the
    validation lists, and the checkpoint that serves carries it (a model saved without it reads as 0: none). The
    weight is part of the checkpoint's version: the same weights saved with another weight are another version."""
    docs, _ = chain_docs(120)
    data_dir = vector_store(tmp_path, "chain", docs)
    cfg = TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=32, val_queries=50, n_candidates=100)
    outcome = train(data_dir, cfg=cfg, quiet=True, force=True)
    assert outcome.served and outcome.meta["model_config"]["memory_boost"] in MEMORY_BOOSTS[1:]
    with open_store(data_dir, readonly=True) as store:
        model, _ = served_model(store)
        assert model.cfg.memory_boost == outcome.meta["model_config"]["memory_boost"]
        assert RerankPipeline(model, store).memory is for_store(store)
    weight = outcome.meta["model_config"]["memory_boost"]
    r = run_cli("info", "--data-dir", str(data_dir))
    assert r.returncode == 0 and f"transition memory weight {weight:g}" in r.stdout, r.stdout + r.stderr
    assert outcome.meta["model_version"] == versions(model)[0] != weights_version(model.state_dict())
    model.cfg.memory_boost = 0.0
    none = save_checkpoint(tmp_path / "none.safetensors", model, {})
    assert "memory_boost" not in read_checkpoint_meta(tmp_path / "none.safetensors")["model_config"]
    assert load_checkpoint(tmp_path / "none.safetensors")[0].cfg.memory_boost == 0.0
    assert none["model_version"] == weights_version(model.state_dict()) != outcome.meta["model_version"]


def test_a_training_query_is_predicted_without_its_own_documents_transitions():
    """Training with the memory (TrainConfig.train_memory_weight) predicts each training query's next vector from the other
    documents' transitions: its own document's hold the very step to its target. Documents of random vectors, so
    that no other document's transition leads there."""
    rng = np.random.default_rng(3)
    doc_ids = [f"d{d}" for d in range(200) for _ in range(5)]
    vectors = unit_vectors(len(doc_ids), DIM, seed=4)
    memory = TransitionMemory.of_documents(doc_ids, vectors)
    train_docs = [d for d in dict.fromkeys(doc_ids) if split_of(d) == "train"]
    rows = np.array([doc_ids.index(d) + int(rng.integers(4)) for d in train_docs])  # a paragraph with a next one
    codes = document_codes(doc_ids)
    own = memory.predict(vectors[rows])
    left_out = memory.predict_leaving_out(vectors[rows], np.array([codes[doc_ids[r]] for r in rows]))
    to_next = lambda p: np.sum(p * vectors[rows + 1], axis=1)  # noqa: E731
    assert (to_next(own) > 0.95).all()  # its own transition, found again: the target itself
    assert (to_next(left_out) < 0.7).all()
    nobody = memory.predict_leaving_out(vectors[rows], np.full(len(rows), -1))  # no key's document: as predict()
    np.testing.assert_allclose(nobody, own, atol=1e-5)


def test_training_beside_the_memorys_term_serves_a_model_with_it(tmp_path, monkeypatch):
    """``nextpara train --train-memory-weight W``: phase 2 scores its lists with the memory's term and mines them
    widened by its candidates, each training query's from the other documents' transitions; the weights that serve
    are fitted after training from the memory's term at 0, as without it."""
    from nextpara.attention_core.training import Trainer

    fitted_at = []
    fit = Trainer.tune_lexical_boost
    monkeypatch.setattr(Trainer, "tune_lexical_boost", lambda self, lists: fitted_at.append(self.model.cfg.memory_boost)
                        or fit(self, lists))
    docs, _ = chain_docs(120)
    data_dir = vector_store(tmp_path, "chain", docs)
    cfg = TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=32, val_queries=50, n_candidates=5,
                      train_memory_weight=4)
    outcome = train(data_dir, cfg=cfg, quiet=True, force=True)
    assert outcome.served and outcome.meta["training"]["train_config"]["train_memory_weight"] == 4
    assert outcome.meta["model_config"]["memory_boost"] in MEMORY_BOOSTS[1:]
    history = [h for h in outcome.meta["training"]["history"] if h["phase"] == 2]
    # 5-deep vector sources hold the next topic for almost no query (the test above): the training lists that hold
    # it were widened by the memory's candidates, from the other documents' transitions
    n = outcome.meta["training"]["train_queries"]
    assert history and 0.6 * n < history[0]["usable_queries"]
    # ... but not every one: a query's own document's transition would put its very target among them (every list
    # held it when training mined with the store's whole memory)
    assert history[0]["usable_queries"] < 0.95 * n
    assert fitted_at == [0.0]  # the word boost fitted as before: without the memory's term
    assert history[0]["stage1_recall"] > 0.6
    r = run_cli("train", "--data-dir", str(data_dir), "--train-memory-weight", "-1")
    assert r.returncode != 0 and "--train-memory-weight must be at least 0" in r.stderr, r.stderr


def test_a_large_memory_is_searched_by_a_graph_that_is_the_same_every_time_it_is_built():
    """Above EXACT_UP_TO keys the memory is an HNSW graph: two built from the same transitions predict the same
    vectors (a batch job resumed in another process ranks as the first run did); up to it, the search is exact."""
    import faiss

    keys = unit_vectors(EXACT_UP_TO + 1000, DIM, seed=3, clusters=40)
    steps = unit_vectors(len(keys), DIM, seed=4) * 0.5
    last = unit_vectors(300, DIM, seed=5, clusters=40)
    first, second = TransitionMemory(keys, steps), TransitionMemory(keys, steps)
    assert first.index.ntotal == len(keys) and isinstance(first.index, faiss.IndexHNSWFlat)
    assert np.array_equal(first.predict(last), second.predict(last))
    exact = TransitionMemory(keys[:EXACT_UP_TO], steps[:EXACT_UP_TO])
    assert isinstance(exact.index, faiss.IndexFlatIP)
    assert len(TransitionMemory(keys[:0], steps[:0])) == 0 and TransitionMemory(keys[:0], steps[:0]).predict(last) is None


def test_a_read_only_copy_remembers_the_paragraphs_its_vectors_hold_until_it_catches_up(tmp_path):
    """Its writer's new documents are in SQLite before they are in the copy's vectors: the memory leaves them out
    (reading their vectors raised "unknown paragraph id", and every query of the copy failed with it), then holds
    them once the copy has caught up."""
    docs, _ = chain_docs(40)
    path = vector_store(tmp_path, "chain", docs)
    writer, reader = open_store(path), open_store(path, readonly=True)
    before = len(TransitionMemory.from_store(reader))
    more, _ = chain_docs(30, seed=1, first=40)
    added = [d for d in more if split_of(d[0]) == "train"]
    writer.add_documents([Document(doc_id=d, paragraphs=p) for d, p, _ in added], [v for _, _, v in added])
    assert len(TransitionMemory.from_store(reader)) == before
    reader.catch_up()
    assert len(TransitionMemory.from_store(reader)) == before + sum(len(p) - 1 for _, p, _ in added)
    reader.close()
    writer.close()


def test_a_checkpoint_serves_the_weight_its_training_fitted_and_a_general_model_from_before_the_memory_a_default():
    assert memory_weight({"model_config": {"memory_boost": 8.0}}, general=True) == 8.0
    assert memory_weight({"model_config": {}, "training": {"memory_boost": 0.0}}, general=True) == 0.0  # fitted: 0
    assert memory_weight({"model_config": {}, "training": {}}, general=True) == GENERAL_MEMORY_BOOST  # from before
    assert memory_weight({"model_config": {}}, general=False) == 0.0  # a store's own model from before: none
