"""Training and evaluation: metrics by hand, a predictable synthetic corpus, a slice of PEPs."""

import json

import numpy as np
import pytest
import torch
from conftest import peps_slice, vector_store
from nextpara.attention_core.evaluation import Evaluation
from nextpara.attention_core.metrics import NO_HIT, summarize
from nextpara.attention_core.model_config import RerankerConfig
from nextpara.attention_core.pipeline import RerankPipeline
from nextpara.attention_core.sequences import ParagraphSequences, Query, split_of
from nextpara.attention_core.train_flow import train
from nextpara.attention_core.training import TrainConfig, Trainer
from nextpara.store.corpus import CorpusReader
from nextpara.store.ingest import build
from nextpara.store.store import open_store

SMALL_MODEL = {"d_model": 64, "n_heads": 4, "n_context_layers": 1}


def test_metrics_agree_with_a_hand_computed_example():
    m = summarize(np.array([1, 3, NO_HIT, 2, 11]))
    assert m["recall@1"] == pytest.approx(1 / 5)
    assert m["recall@10"] == pytest.approx(3 / 5)
    assert m["mrr@10"] == pytest.approx((1 + 1 / 3 + 0 + 1 / 2 + 0) / 5)
    lo, hi = m["mrr@10_ci"]
    assert 0 <= lo <= m["mrr@10"] <= hi <= 1


def test_split_rule_is_the_fixed_md5_rule():
    import hashlib

    for doc in ["pep-0001", "pep-0008", "module:json", "x"]:
        bucket = int(hashlib.md5(doc.encode()).hexdigest(), 16) % 10
        assert split_of(doc) == ("train" if bucket < 8 else "validation" if bucket == 8 else "test")


def predictable_docs(n_docs=400, n_par=12, dim=32, seed=0):
    """Documents whose next paragraph is a fixed rotation of the last one (plus noise): cosine cannot see it,
    a model that learns the rotation can."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    for d in range(n_docs):
        v = rng.standard_normal(dim)
        vecs = []
        for _ in range(n_par):
            v = v / np.linalg.norm(v)
            vecs.append(v)
            v = rotation @ v + 0.05 * rng.standard_normal(dim)
        yield f"chain-{d}", [f"chain {d} step {p}" for p in range(n_par)], np.array(vecs)


@pytest.fixture(scope="module")
def predictable_store(tmp_path_factory):
    return vector_store(tmp_path_factory.mktemp("predictable"), "rotation32", predictable_docs())


FAST = TrainConfig(phase1_epochs=6, phase2_epochs=2, batch_size=64, lr=3e-3, val_queries=200, n_candidates=30)


def test_retraining_an_unchanged_store_says_it_made_the_same_model(tmp_path):
    store = vector_store(tmp_path, "rotation32", predictable_docs(n_docs=120))
    cfg = TrainConfig(phase1_epochs=4, phase2_epochs=2, batch_size=32, lr=3e-3, val_queries=50, n_candidates=20)
    first = train(store, {"d_model": 32, "n_heads": 2, "n_context_layers": 1}, cfg, quiet=True)
    assert first.served and first.meta["metrics"]["guard"]["new"]["mrr@10"] > 0.5, first.line
    # judged against what served before it: plain cosine, as for any store the general model does not fit
    assert json.loads((store / "train_report.json").read_text())["replaced"] == "plain cosine (B1)"
    again = train(store, {"d_model": 32, "n_heads": 2, "n_context_layers": 1}, cfg, quiet=True)
    assert not again.served and again.meta["model_version"] == first.meta["model_version"]  # seeded: the same weights
    assert again.line.startswith(f"kept the previous model {first.meta['model_version']}: training made it again, "
                                 "weight for weight (the same store and settings), so nothing changes"), again.line


def test_predictable_sequences_are_learned(predictable_store):
    outcome = train(predictable_store, SMALL_MODEL, FAST, quiet=True)
    assert outcome.served, outcome.line  # no general model for this embedder, and the model beats plain cosine (B1)
    meta = outcome.meta
    assert meta["metrics"]["validation"]["recall@1"] > 0.9
    from nextpara.attention_core.checkpoint import load_checkpoint

    model, _ = load_checkpoint(predictable_store / "model.safetensors", "rotation32", 32)
    with open_store(predictable_store, readonly=True) as store:
        seq = ParagraphSequences(store)
        result = Evaluation(store, seq, None, RerankPipeline(model, store, 30), n_queries=300).evaluate(latency_queries=5)
    methods = result["methods"]
    assert methods["full"]["recall@1"] > 0.9 and methods["head"]["recall@1"] > 0.9
    assert methods["B1"]["recall@1"] < 0.3  # cosine alone does not see the rotation


def test_the_fast_scorer_is_a_train_option_and_serves_without_attention(tmp_path):
    """``nextpara train --scorer fast`` (what a user types) trains the cheaper scorer, which learns the rotation through
    the query head's cosine, serves predictions, and has no cross-attention weights to show."""
    from conftest import run_cli
    from nextpara.attention_core.predictor import Predictor
    store_dir = vector_store(tmp_path, "rotation32", predictable_docs(n_docs=200))
    r = run_cli("train", "--data-dir", str(store_dir), "--scorer", "fast", "--phase1-epochs", "6", "--phase2-epochs", "2",
                "--batch-size", "64", "--lr", "0.003", "--val-queries", "200", "--n-candidates", "30",
                "--d-model", "64", "--layers", "1", "--json")
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout)["model"]
    assert meta["model_config"]["candidate_tokens"] is False and meta["model_config"]["n_scorer_layers"] == 0
    assert meta["metrics"]["validation"]["recall@1"] > 0.9
    info = run_cli("info", "--data-dir", str(store_dir))
    assert info.returncode == 0 and f"trained {meta['model_version']} (from scratch" in info.stdout, info.stdout
    assert ", fast scorer" in info.stdout, info.stdout
    with Predictor.open(store_dir) as predictor:
        context = [int(i) for i in predictor.store.ids_of_documents(["chain-0"])[:4]]
        result = predictor.predict_next(context, top_k=3, include_attention=True)
    assert len(result.predictions) == 3 and result.attention is None


def test_training_is_deterministic_under_a_seed(predictable_store):
    cfg = TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=64, val_queries=50, n_candidates=20,
                      max_train_queries=500)
    versions = []
    for _ in range(2):
        with open_store(predictable_store, readonly=True) as store:
            trainer = Trainer(store, ParagraphSequences(store), RerankerConfig(embed_dim=32, **SMALL_MODEL), cfg, quiet=True)
            trainer.fit()
            from nextpara.attention_core.checkpoint import weights_version

            versions.append(weights_version(trainer.model.state_dict()))
    assert versions[0] == versions[1]


@pytest.mark.corpus
@pytest.mark.slow
def test_training_on_a_peps_slice_lowers_loss_and_beats_random(peps_path, tmp_path):
    (tmp_path / "slice.jsonl").write_text("".join(peps_slice(peps_path, {"train": 500, "validation": 60})))
    build(str(tmp_path / "slice.jsonl"), tmp_path / "store", quiet=True)
    cfg = TrainConfig(phase1_epochs=2, phase2_epochs=1, batch_size=64, val_queries=100, n_candidates=50)  # 86 there
    with open_store(tmp_path / "store", readonly=True) as store:
        seq = ParagraphSequences(store)
        trainer = Trainer(store, seq, RerankerConfig(embed_dim=384, **SMALL_MODEL), cfg, quiet=True)
        before = trainer.validation_loss()
        result = trainer.fit()
        after = trainer.validation_loss()
        assert after < before, (before, after)
        lists = trainer.mine(trainer.val_q)
        rng = np.random.default_rng(0)
        random_ranks = []
        for rows, q in zip(lists, trainer.val_q):
            shuffled = rows[rng.permutation(len(rows))][:10]
            hits = np.flatnonzero(seq.text_class[shuffled] == seq.text_class[q.target])
            random_ranks.append(hits[0] + 1 if len(hits) else NO_HIT)
        random_mrr = summarize(np.array(random_ranks))["mrr@10"]
        assert result["validation"]["mrr@10"] > 2 * random_mrr + 0.02, (result["validation"], random_mrr)


def builtin_slice(path, n_docs=50):
    docs = [d for _, d in zip(range(n_docs), CorpusReader("builtin"))]
    path.write_text("".join(json.dumps({"doc_id": d.doc_id, "title": d.title, "paragraphs": d.paragraphs}) + "\n"
                            for d in docs))
    return path


def test_near_positives_are_the_target_and_the_paragraphs_after_it(predictable_store):
    """near_weight's second loss: its positives are the target and the near_window paragraphs after it in its own
    document (none past the document's end), and nothing else of the list."""
    with open_store(predictable_store, readonly=True) as store:
        seq = ParagraphSequences(store)
        trainer = Trainer(store, seq, RerankerConfig(embed_dim=32, lexical=False, **SMALL_MODEL),
                          TrainConfig(near_weight=0.5, near_window=2, val_queries=10, max_train_queries=50))
        doc = seq.doc_rows["chain-0"]
        near_end, at_end = Query(doc[:4], int(doc[4])), Query(doc[-5:-1], int(doc[-1]))
        other = seq.doc_rows["chain-1"]
        lists = [np.array([doc[4], doc[5], doc[6], doc[7], other[5], doc[1]]), np.array([doc[-1], doc[-2], other[0]])]
        positive = torch.zeros(2, 6, dtype=torch.bool)
        positive[0, 0] = positive[1, 0] = True
        near = trainer.near_positives(list(zip([near_end, at_end], lists, [None, None])), positive)
    assert near[0].tolist() == [True, True, True, False, False, False]  # the target, then 2 after it
    assert near[1].tolist() == [True, False, False, False, False, False]  # the document's last: nothing after it


def test_init_shrink_starts_between_the_given_weights_and_a_fresh_model(predictable_store):
    """TrainConfig.init_shrink: training starts at that mix of the weights it is given and the model's own fresh
    initialisation under the same seed; 1 (the default) starts at the given weights exactly. What is fitted to the
    store (its word weights, the lexical boost) is never taken from the given weights, mixed or not."""
    from nextpara.attention_core.training import STORE_FITTED

    model_cfg = RerankerConfig(embed_dim=32, **SMALL_MODEL)
    small = {"val_queries": 10, "max_train_queries": 50}
    with open_store(predictable_store, readonly=True) as store:
        seq = ParagraphSequences(store)
        fresh = Trainer(store, seq, model_cfg, TrainConfig(**small)).model.state_dict()
        given = {k: torch.full_like(v, 2.0) if v.is_floating_point() else v for k, v in fresh.items()}
        mixed = Trainer(store, seq, model_cfg, TrainConfig(**small, init_shrink=0.25), init_state=given).model.state_dict()
        whole = Trainer(store, seq, model_cfg, TrainConfig(**small), init_state=given).model.state_dict()
    floats = [k for k, v in fresh.items() if v.is_floating_point() and k not in STORE_FITTED]
    assert floats and any(not torch.equal(fresh[k], given[k]) for k in floats)
    for k in floats:
        assert torch.allclose(mixed[k], 0.25 * 2.0 + 0.75 * fresh[k]), k
        assert torch.equal(whole[k], given[k]), k
    for k in STORE_FITTED:
        assert torch.equal(mixed[k], fresh[k]) and torch.equal(whole[k], fresh[k]), k
    assert float(mixed["lexical_boost"]) == 0.0


def test_phase_two_scores_its_lists_beside_the_memorys_term(predictable_store, monkeypatch):
    """train_memory_weight W: phase 2's listwise loss reads the model's scores plus W times each candidate's cosine to
    the query's memory prediction, as serving adds the term; 0 leaves the scores as the model gives them."""
    from dataclasses import replace

    from nextpara.attention_core import training

    seen = []
    nce = training.multi_positive_nce
    monkeypatch.setattr(training, "multi_positive_nce", lambda scores, positive: seen.append(scores.detach()) or
                        nce(scores, positive))
    with open_store(predictable_store, readonly=True) as store:
        seq = ParagraphSequences(store)
        cfg = TrainConfig(val_queries=10, max_train_queries=50, phase2_query_weight=0.0, train_memory_weight=4.0)
        trainer = Trainer(store, seq, RerankerConfig(embed_dim=32, lexical=False, **SMALL_MODEL), cfg)
        trainer.model.eval()  # no dropout: the two calls score alike
        doc = seq.doc_rows["chain-0"]
        rows = np.array([doc[4], doc[5], doc[1]])
        p = seq.vectors[doc[5]]  # a prediction that lies on the second candidate
        batch = [(Query(doc[:4], int(doc[4])), rows, p)]
        trainer.phase2_step(batch)
        trainer.cfg = replace(cfg, train_memory_weight=0.0)
        trainer.phase2_step(batch)
    np.testing.assert_allclose((seen[0] - seen[1])[0].numpy(), 4.0 * (seq.vectors[rows] @ p), atol=1e-4)
