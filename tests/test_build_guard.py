"""The guard after `nextpara build`: a store with no model of its own is served by the general model only where that
scores at least as well as plain cosine on the store's validation split (attention_core/build_guard.py)."""

import json
import random

import numpy as np
import pytest
from conftest import run_cli, vector_store
from nextpara.attention_core.build_guard import BUILD, describes_what_serves, guard_general
from nextpara.attention_core.checkpoint import CHECKPOINT, read_checkpoint_meta, save_checkpoint
from nextpara.attention_core.general import GENERAL_VERSION, cosine_model, describe_served, served_model
from nextpara.attention_core.guard import TRAIN_REPORT, judge_served
from nextpara.attention_core.sequences import split_of
from nextpara.store.corpus import CorpusReader
from nextpara.store.store import open_store

WORDS = ("river stone lantern copper meadow violet harbor thunder orchard velvet glacier ember falcon marble willow "
         "canyon saffron beacon quartz tundra juniper cobalt prairie sparrow obsidian lagoon cedar amber").split()


def walking_docs(n_docs=200, n_par=10, n_words=12, seed=0):
    """Each paragraph the one before with one word swapped: the last paragraph's nearest text is the next one, which
    plain cosine finds nearly every time; the general model, which also weighs the rest of the context, finds it less
    often (the test checks that this is so)."""
    rng = random.Random(seed)
    for d in range(n_docs):
        words, paragraphs = rng.sample(WORDS, n_words), []
        for _ in range(n_par):
            paragraphs.append(" ".join(words) + ".")
            words = list(words)
            words[rng.randrange(n_words)] = rng.choice(WORDS)
        yield {"doc_id": f"walk-{d}", "paragraphs": paragraphs}


def write_jsonl(path, docs):
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    return path


def builtin_docs(split: str, n: int) -> list[dict]:
    return [{"doc_id": d.doc_id, "paragraphs": d.paragraphs} for d in CorpusReader("builtin")
            if split_of(d.doc_id) == split and len(d.paragraphs) >= 5][:n]


def figures(mrr: float) -> dict:
    return {"mrr@10": mrr, "mrr@10_ci": [mrr - 0.02, mrr + 0.02]}


@pytest.mark.parametrize("served, b1, cosine", [(0.20, 0.10, False), (0.20, 0.20, False), (0.0, 0.0, False),
                                                (0.19, 0.20, True), (0.0, 0.01, True)])
def test_the_general_model_keeps_serving_only_at_or_above_cosine(served, b1, cosine):
    verdict = judge_served({"replaced": figures(served), "B1": figures(b1)}, "the general model g1")
    assert (verdict.serve_new, verdict.serve_cosine) == (False, cosine)
    assert verdict.line.startswith("serving plain cosine (B1) from now on: " if cosine else "the general model g1 serves: ")
    assert f"{served:.3f} [" in verdict.line and f"{b1:.3f} [" in verdict.line


@pytest.mark.parametrize("report, cosine_serves, describes", [
    (None, False, False),  # never judged
    ({"serve_new": False, "serve_cosine": False, "replaced": "the general model g1"}, False, True),  # kept it
    ({"serve_new": False, "serve_cosine": True, "replaced": "the general model g1"}, True, True),  # chose cosine
    ({"serve_new": False, "serve_cosine": True, "replaced": "the general model g1"}, False, False),  # checkpoint gone
    ({"serve_new": False, "serve_cosine": False, "replaced": "plain cosine (B1)"}, True, True),  # training kept cosine
    ({"serve_new": True, "serve_cosine": False, "replaced": "the general model g1"}, False, False),  # its model gone
])
def test_an_unchanged_build_judges_again_only_where_the_last_report_is_not_of_what_serves(report, cosine_serves,
                                                                                         describes):
    assert describes_what_serves(report, cosine_serves) == describes


def test_a_build_where_cosine_beats_the_general_model_serves_cosine(tmp_path):
    corpus, store = write_jsonl(tmp_path / "walk.jsonl", walking_docs()), tmp_path / "store"
    out = run_cli("build", "--corpus", str(corpus), "--data-dir", str(store), "--json")
    assert out.returncode == 0, out.stderr
    guard = json.loads(out.stdout)["guard"]
    report = json.loads((store / TRAIN_REPORT).read_text())
    general, b1 = report["figures"]["replaced"], report["figures"]["B1"]
    assert b1["mrr@10_ci"][0] > general["mrr@10_ci"][1], report  # the corpus does what it says: cosine is clearly ahead
    assert guard == {"judged": True, "line": report["line"], "cosine": True}
    assert report["line"].startswith("serving plain cosine (B1) from now on") and report["judged_by"] == BUILD
    assert report["replaced"] == f"the general model {GENERAL_VERSION}" and f"{general['mrr@10']:.3f}" in report["line"]
    meta = read_checkpoint_meta(store / CHECKPOINT)
    assert (meta["kind"], meta["judged_by"], meta["line"]) == ("cosine", BUILD, report["line"])

    info = json.loads(run_cli("info", "--data-dir", str(store), "--json").stdout)["model"]
    assert (info["source"], info["reason"]) == ("cosine", report["line"])
    assert info["validation"] == {"model": b1, "B1": b1}
    text = run_cli("info", "--data-dir", str(store)).stdout
    assert f"guard         {report['line']}" in text
    with open_store(store, readonly=True) as s:
        model, served = served_model(s)
    assert served["source"] == "cosine" and not model.cfg.lexical  # what serves ranks by cosine alone

    again = run_cli("build", "--corpus", str(corpus), "--data-dir", str(store))  # nothing changed: not judged again
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == f"{store} is unchanged: not judged again ({report['line']})"
    assert read_checkpoint_meta(store / CHECKPOINT)["saved_at"] == meta["saved_at"]
    (store / CHECKPOINT).unlink()  # the README's way back to the general model: judged again by the next build
    again = run_cli("build", "--corpus", str(corpus), "--data-dir", str(store))
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == report["line"], again.stdout
    assert read_checkpoint_meta(store / CHECKPOINT)["judged_by"] == BUILD


def test_a_later_build_judges_again_and_brings_back_a_general_model_that_scores_as_well(tmp_path):
    """A store an earlier build put on plain cosine is judged again when a build changes it; where the general model
    now scores at least as well, the build's cosine checkpoint goes and the general model serves, with its figures."""
    docs = builtin_docs("train", 12) + builtin_docs("validation", 8)
    store = tmp_path / "store"
    first = run_cli("build", "--corpus", str(write_jsonl(tmp_path / "a.jsonl", docs[:-1])), "--data-dir", str(store),
                    "--no-guard")
    assert first.returncode == 0 and not (store / TRAIN_REPORT).exists() and not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:  # as an earlier build that found cosine ahead would have left it
        save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {"kind": "cosine", "judged_by": BUILD, "line": "earlier",
                                                                  "embedder": {"name": s.embedder_name, "dim": s.dim}})
    out = run_cli("build", "--corpus", str(write_jsonl(tmp_path / "b.jsonl", docs)), "--data-dir", str(store), "--json")
    assert out.returncode == 0, out.stderr
    guard, report = json.loads(out.stdout)["guard"], json.loads((store / TRAIN_REPORT).read_text())
    general, b1 = report["figures"]["replaced"], report["figures"]["B1"]
    assert general["mrr@10"] >= b1["mrr@10"], report  # the built-in docs: the general model was trained on their kind
    assert guard == {"judged": True, "line": report["line"], "cosine": False}
    assert report["line"].startswith(f"the general model {GENERAL_VERSION} serves: validation MRR@10")
    assert not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:
        served = describe_served(s)
    assert (served["source"], served["model_version"]) == ("general", GENERAL_VERSION)
    assert served["validation"] == {"model": general, "B1": b1}


def test_a_build_judges_nothing_it_cannot_or_need_not(tmp_path):
    store = tmp_path / "store"  # training documents only: no validation split to judge on
    out = run_cli("--quiet", "build", "--corpus", str(write_jsonl(tmp_path / "t.jsonl", builtin_docs("train", 6))),
                  "--data-dir", str(store))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == (f"the general model {GENERAL_VERSION} serves {store}, not judged: the store "
                                           "holds no validation documents (the split rule puts 10% of documents there)")
    assert not (store / TRAIN_REPORT).exists() and not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:  # a model chosen by `nextpara train` (here plain cosine) is left alone
        save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {"kind": "cosine", "line": "kept by training",
                                                                  "embedder": {"name": s.embedder_name, "dim": s.dim}})
    outcome = guard_general(store)
    assert (outcome.judged, outcome.cosine) == (False, True) and "chosen by `nextpara train`: not judged again" in outcome.line

    (tmp_path / "vec").mkdir()
    rng = np.random.default_rng(0)  # another embedder than the general model's: it cannot serve, nothing is judged
    vectors = vector_store(tmp_path / "vec", "rand32", ((f"v{d}", [f"v {d} {p}" for p in range(6)],
                                                        rng.standard_normal((6, 32))) for d in range(40)))
    outcome = guard_general(vectors)
    assert not outcome.judged and outcome.line.startswith("the general model was not judged: ") and "32" in outcome.line
    assert not (vectors / CHECKPOINT).exists()
