"""The guard after `nextpara build`: a store with no model of its own is served by the general model unless plain cosine
scores clearly better on the store's validation split (attention_core/build_guard.py)."""

import json
import stat

import numpy as np
import pytest
from conftest import run_cli, vector_store
from nextpara.attention_core.build_guard import BUILD, describes_what_serves, guard_general
from nextpara.attention_core.checkpoint import save_checkpoint
from nextpara.attention_core.general import cosine_model, served_model
from nextpara.attention_core.guard import judge_served
from nextpara.attention_core.sequences import split_of
from nextpara.attention_core.served import (
    CHECKPOINT,
    GENERAL_VERSION,
    TRAIN_REPORT,
    describe_served,
    read_checkpoint_meta,
)
from nextpara.attention_core.train_config import TrainConfig
from nextpara.attention_core.train_flow import train
from nextpara.store.corpus import CorpusReader
from nextpara.store.store import open_store

from bench.quality.build_guard import plural_walks  # a corpus where cosine is clearly better than the general model

GENERAL = f"the general model {GENERAL_VERSION}"


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


def last_line(out) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("served, b1, says", [
    (0.20, 0.10, "the general model g1 serves: validation MRR@10 0.200 [0.180, 0.220], at least B1"),
    (0.20, 0.20, "the general model g1 serves: validation MRR@10 0.200 [0.180, 0.220], at least B1"),  # a tie keeps it
    (0.0, 0.0, "the general model g1 serves: "),
    (0.19, 0.22, "cosine scores higher here, but inside the noise (the intervals overlap)"),  # 0.20 < 0.21: overlap
    (0.10, 0.15, "serving plain cosine (B1) from now on: its validation MRR@10 0.150 [0.130, 0.170] is clearly above "
                 "the general model g1's 0.100 [0.080, 0.120]"),
    (0.0, 0.05, "serving plain cosine (B1) from now on: "),
])
def test_the_general_model_keeps_serving_unless_cosine_is_clearly_above_it(served, b1, says):
    verdict = judge_served({"replaced": figures(served), "B1": figures(b1)}, "the general model g1")
    assert not verdict.serve_new and verdict.serve_cosine == says.startswith("serving plain cosine")
    assert says in verdict.line, verdict.line


def test_intervals_that_touch_keep_the_general_model():
    touching = {"replaced": {"mrr@10": 0.10, "mrr@10_ci": [0.08, 0.125]},
                "B1": {"mrr@10": 0.15, "mrr@10_ci": [0.125, 0.17]}}
    verdict = judge_served(touching, "the general model g1")
    assert not verdict.serve_cosine and "but inside the noise" in verdict.line
    touching["B1"]["mrr@10_ci"][0] = 0.126  # clear of it by a little: cosine
    assert judge_served(touching, "the general model g1").serve_cosine


@pytest.mark.parametrize("served, b1, cosine, says", [
    (0.19, 0.20, True, "kept plain cosine (B1): its validation MRR@10 0.200 [0.180, 0.220] is still above the general "
                       "model g1's 0.190 [0.170, 0.210]"),  # inside the noise: what serves stays
    (0.10, 0.15, True, "kept plain cosine (B1): "),
    (0.20, 0.20, False, "the general model g1 serves again: validation MRR@10 0.200 [0.180, 0.220], at least B1"),
    (0.25, 0.20, False, "the general model g1 serves again: "),
    (0.21, 0.20, False, "the general model g1 serves again: "),  # ahead inside the noise: enough to come back
])
def test_a_builds_plain_cosine_stays_until_the_general_model_scores_as_well(served, b1, cosine, says):
    verdict = judge_served({"replaced": figures(served), "B1": figures(b1)}, "the general model g1", cosine_serves=True)
    assert (verdict.serve_new, verdict.serve_cosine) == (False, cosine) and verdict.line.startswith(says), verdict.line


BUILT = {"judged_by": BUILD, "judged_against": GENERAL_VERSION}  # the checkpoint of a build that chose cosine


@pytest.mark.parametrize("report, mine, describes", [
    (None, None, False),  # never judged
    ({"serve_cosine": False, "replaced": GENERAL}, None, True),  # a guard kept the general model
    ({"serve_cosine": False, "replaced": GENERAL, "index_generation": 6}, None, False),  # the store changed since
    ({"serve_cosine": False, "replaced": "the general model 0123456789ab"}, None, False),  # another general model
    ({"serve_cosine": False, "replaced": "the previous model abc"}, None, False),  # training kept a model since deleted
    ({"serve_new": True, "serve_cosine": False, "replaced": GENERAL}, None, False),  # its new model since deleted
    ({"serve_cosine": True, "replaced": GENERAL}, BUILT, True),  # a build chose cosine
    ({"serve_cosine": True, "replaced": GENERAL}, None, False),  # ... and the checkpoint is gone (deleted, or a kill)
    ({"serve_cosine": False, "replaced": GENERAL}, BUILT, False),  # a kill between the checkpoint and the report
    ({"serve_cosine": True, "replaced": GENERAL}, {**BUILT, "judged_against": "0123456789ab"}, False),  # new general
    ({"serve_cosine": True, "replaced": "the general model 0123456789ab"}, BUILT, False),  # a kill between the writes
    ({"serve_cosine": False, "replaced": "plain cosine (B1)"}, BUILT, True),  # a training kept the build's cosine
])
def test_a_build_judges_again_unless_the_last_report_judged_what_serves_the_store_as_it_is(report, mine, describes):
    report = report and {"serve_new": False, "index_generation": 7, **report}
    assert describes_what_serves(report, 7, mine) == describes


def test_a_build_where_cosine_is_clearly_better_serves_cosine(tmp_path):
    corpus, store = write_jsonl(tmp_path / "walk.jsonl", plural_walks()), tmp_path / "store"
    out = run_cli("build", "--corpus", str(corpus), "--data-dir", str(store), "--json")
    assert out.returncode == 0, out.stderr
    guard = json.loads(out.stdout)["guard"]
    report = json.loads((store / TRAIN_REPORT).read_text())
    general, b1 = report["figures"]["replaced"], report["figures"]["B1"]
    assert b1["mrr@10_ci"][0] > general["mrr@10_ci"][1], report  # the corpus does what it says: cosine is clearly ahead
    assert guard == {"judged": True, "line": report["line"], "cosine": True}
    assert report["line"].startswith("serving plain cosine (B1) from now on") and report["judged_by"] == BUILD
    assert report["replaced"] == GENERAL and f"{general['mrr@10']:.3f}" in report["line"]
    meta = read_checkpoint_meta(store / CHECKPOINT)
    assert (meta["kind"], meta["judged_by"], meta["judged_against"], meta["line"]) == (
        "cosine", BUILD, GENERAL_VERSION, report["line"])
    mode = stat.S_IMODE((store / CHECKPOINT).stat().st_mode)  # as the report's, a plain file: another user can read it
    assert mode == stat.S_IMODE((store / TRAIN_REPORT).stat().st_mode)

    info = json.loads(run_cli("info", "--data-dir", str(store), "--json").stdout)["model"]
    assert (info["source"], info["reason"]) == ("cosine", report["line"])
    assert info["validation"] == {"model": b1, "B1": b1}
    assert f"guard         {report['line']}" in run_cli("info", "--data-dir", str(store)).stdout
    with open_store(store, readonly=True) as s:
        model, served = served_model(s)
    assert served["source"] == "cosine" and not model.cfg.lexical  # what serves ranks by cosine alone

    again = last_line(run_cli("build", "--corpus", str(corpus), "--data-dir", str(store)))  # nothing changed
    assert again == f"unchanged since the guard's last verdict, not judged again: {report['line']}"
    assert read_checkpoint_meta(store / CHECKPOINT)["saved_at"] == meta["saved_at"]
    (store / CHECKPOINT).unlink()  # the README's way back to the general model: judged again by the next build
    assert last_line(run_cli("build", "--corpus", str(corpus), "--data-dir", str(store))) == report["line"]
    more = write_jsonl(tmp_path / "more.jsonl", plural_walks(n_docs=6, seed=1))  # unjudged: the next build judges
    assert run_cli("build", "--corpus", str(more), "--data-dir", str(store), "--no-guard").returncode == 0
    assert last_line(run_cli("build", "--corpus", str(more), "--data-dir", str(store))).startswith(
        "kept plain cosine (B1): its validation MRR@10 ")  # judged again, and still ahead

    # `nextpara train` then judges its model against cosine; a training that keeps cosine leaves the build's checkpoint
    training = write_jsonl(tmp_path / "training.jsonl", plural_walks("train"))
    assert run_cli("build", "--corpus", str(training), "--data-dir", str(store), "--no-guard").returncode == 0
    outcome = train(store, {"d_model": 32, "n_heads": 2, "n_context_layers": 1},
                    TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=32, val_queries=50, n_candidates=20),
                    quiet=True)
    report = json.loads((store / TRAIN_REPORT).read_text())
    assert report["replaced"] == "plain cosine (B1)" and outcome.cosine == (not outcome.served)
    assert read_checkpoint_meta(store / CHECKPOINT).get("judged_by") == (None if outcome.served else BUILD)
    unchanged = last_line(run_cli("build", "--corpus", str(more), "--data-dir", str(store)))
    assert unchanged == (f"{store} is served by its own model {outcome.meta['model_version']}: not judged again"
                         if outcome.served else
                         f"unchanged since the guard's last verdict, not judged again: {report['line']}")


def test_a_later_build_judges_again_and_brings_back_a_general_model_that_scores_as_well(tmp_path):
    """A store an earlier build put on plain cosine (no report of it here) is judged by the next build; where the
    general model scores at least as well, the build's cosine checkpoint goes and the general model serves, with its
    figures."""
    docs = builtin_docs("train", 12) + builtin_docs("validation", 8)
    store = tmp_path / "store"
    first = run_cli("build", "--corpus", str(write_jsonl(tmp_path / "a.jsonl", docs[:-1])), "--data-dir", str(store),
                    "--no-guard", "--json")
    assert first.returncode == 0 and "guard" not in json.loads(first.stdout)
    assert not (store / TRAIN_REPORT).exists() and not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:  # as an earlier build that found cosine ahead would have left it
        save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {"kind": "cosine", "line": "earlier", **BUILT,
                                                                  "embedder": {"name": s.embedder_name, "dim": s.dim}})
    corpus = write_jsonl(tmp_path / "b.jsonl", docs)
    out = run_cli("build", "--corpus", str(corpus), "--data-dir", str(store), "--json")
    assert out.returncode == 0, out.stderr
    guard, report = json.loads(out.stdout)["guard"], json.loads((store / TRAIN_REPORT).read_text())
    general, b1 = report["figures"]["replaced"], report["figures"]["B1"]
    assert general["mrr@10"] >= b1["mrr@10"], report  # the built-in docs: the general model was trained on their kind
    assert guard == {"judged": True, "line": report["line"], "cosine": False}
    assert report["line"].startswith(f"{GENERAL} serves again: validation MRR@10")
    assert not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:
        served = describe_served(s)
    assert (served["source"], served["model_version"]) == ("general", GENERAL_VERSION)
    assert served["validation"] == {"model": general, "B1": b1}
    again = last_line(run_cli("build", "--corpus", str(corpus), "--data-dir", str(store)))
    assert again == f"unchanged since the guard's last verdict, not judged again: {report['line']}"


def test_a_build_judges_nothing_it_cannot_or_need_not(tmp_path):
    store = tmp_path / "store"  # training documents only: no validation split to judge on
    out = run_cli("--quiet", "build", "--corpus", str(write_jsonl(tmp_path / "t.jsonl", builtin_docs("train", 6))),
                  "--data-dir", str(store))
    assert out.stdout.splitlines()[0].startswith(f"built {store}: 6 documents read")  # the build's line comes first
    assert last_line(out) == (f"{GENERAL} serves {store}, not judged: the store holds no validation queries (the split "
                              "rule puts 10% of documents there; a query needs a document of two paragraphs)")
    assert not (store / TRAIN_REPORT).exists() and not (store / CHECKPOINT).exists()
    with open_store(store, readonly=True) as s:  # a model chosen by `nextpara train` (here plain cosine) is left alone
        save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {"kind": "cosine", "line": "kept by training",
                                                                  "embedder": {"name": s.embedder_name, "dim": s.dim}})
    outcome = guard_general(store)
    assert (outcome.judged, outcome.cosine) == (False, True)
    assert "chosen by `nextpara train`: not judged again" in outcome.line
    with open_store(store, readonly=True) as s:  # and so is a trained one
        meta = save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {"embedder": {"name": s.embedder_name,
                                                                                      "dim": s.dim}})
    assert guard_general(store) == type(outcome)(False, f"{store} is served by its own model {meta['model_version']}: "
                                                        "not judged again")
    (store / CHECKPOINT).write_bytes(b"not a checkpoint")  # one that cannot be read: said, and the build stands
    outcome = guard_general(store)
    assert not outcome.judged and outcome.line.startswith("the general model was not judged: ")
    assert "checkpoint" in outcome.line

    (tmp_path / "vec").mkdir()
    rng = np.random.default_rng(0)  # another embedder than the general model's: it cannot serve, nothing is judged
    vectors = vector_store(tmp_path / "vec", "rand32", ((f"v{d}", [f"v {d} {p}" for p in range(6)],
                                                        rng.standard_normal((6, 32))) for d in range(40)))
    outcome = guard_general(vectors)
    assert not outcome.judged and outcome.cosine and outcome.line.startswith(f"plain cosine (B1) serves {vectors}, not "
                                                                             "judged: the general model is for ")
    assert "rand32" in outcome.line and not (vectors / CHECKPOINT).exists()


def waits_for_lock(path) -> bool:
    """Whether some process waits for a flock on ``path`` (a blocked request, "->", in /proc/locks)."""
    import os

    inode = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return any("->" in line and line.split()[-3].endswith(f":{inode}") for line in f)


def test_the_guards_of_build_and_train_take_turns_and_train_judges_what_serves_when_it_ends(tmp_path):
    import fcntl
    import os
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(3)
    store = vector_store(tmp_path, "rand16", ((f"r{d}", [f"paragraph {p} of r{d}" for p in range(6)],
                                               rng.standard_normal((6, 16))) for d in range(60)))

    def blocked(args: list[str]) -> subprocess.Popen:
        """Start ``args`` while this test holds the store's model lock; return once the process waits for it."""
        proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not waits_for_lock(store / "model.lock"):
            assert proc.poll() is None, proc.communicate()  # it must not finish while the lock is held
            assert time.monotonic() < deadline, "the process never asked for the model lock"
            time.sleep(0.2)
        return proc

    fd = os.open(store / "model.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    guard = blocked(["-c", f"from nextpara.attention_core.build_guard import guard_general; "
                           f"print(guard_general({str(store)!r}).line)"])
    os.close(fd)  # released: the guard goes on (and judges nothing here: the general model is of another dimension)
    out, err = guard.communicate(timeout=120)
    assert guard.returncode == 0 and out.startswith(f"plain cosine (B1) serves {store}, not judged: "), err

    fd = os.open(store / "model.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    training = blocked(["-m", "nextpara", "-q", "train", "--data-dir", str(store), "--phase1-epochs", "1",
                        "--phase2-epochs", "1", "--val-queries", "50", "--n-candidates", "20", "--d-model", "32",
                        "--layers", "1", "--json"])  # no model served this store when it started
    with open_store(store, readonly=True) as s:  # what a build's guard writes, written while the training waits
        save_checkpoint(store / CHECKPOINT, cosine_model(s.dim), {
            "kind": "cosine", "judged_by": BUILD, "line": "planted", "embedder": {"name": s.embedder_name, "dim": 16}})
    os.close(fd)
    out, err = training.communicate(timeout=300)
    assert training.returncode == 0, err
    report = json.loads((store / TRAIN_REPORT).read_text())
    assert report["replaced"] == "plain cosine (B1)", report  # judged against what served when it ended
    result = json.loads(out)
    assert result["line"] == report["line"] and result["cosine_serves"] == (not result["served"])


@pytest.mark.parametrize("cosine", [False, True])
def test_too_few_validation_queries_change_nothing_that_serves(cosine):
    """A small notes folder has a dozen validation queries: B1's interval clear of the general model's there is a few
    queries' luck, and the build switched the store to plain cosine (training's guard keeps what serves below 30)."""
    few = {"replaced": {**figures(0.10), "queries": 12}, "B1": {**figures(0.30), "queries": 12}}
    verdict = judge_served(few, "the general model g1", cosine_serves=cosine)
    assert verdict.serve_cosine is cosine and not verdict.serve_new
    kept = "plain cosine (B1)" if cosine else "the general model g1"
    assert verdict.line.startswith(f"kept {kept}: 12 validation queries are too few to tell the general model g1 from "
                                   "cosine (the guard needs 30); the general model g1's validation MRR@10 0.100"), \
        verdict.line  # ("to tell it from cosine", said of cosine, was no sense)
    few["B1"]["queries"] = few["replaced"]["queries"] = 30
    assert judge_served(few, "the general model g1").serve_cosine  # enough to judge: cosine is clearly above
