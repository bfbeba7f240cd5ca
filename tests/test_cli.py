"""The CLI as a user runs it: build, info, search, bad corpora; and the packaging promises."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_cli, write_vector_corpus


def test_build_info_search_text_corpus(tmp_path):
    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "cooking.md").write_text(
        "# Bread\n\nMix flour, water, salt and yeast into a shaggy dough.\n\n"
        "Knead the dough for ten minutes until it is smooth and elastic.\n\n"
        "Let it rise in a warm place until doubled, then bake at 230 degrees.\n")
    (corpus / "space.txt").write_text(
        "The rocket lifted off from the launch pad at dawn.\n\nMinutes later the second stage separated cleanly.\n")
    data = tmp_path / "store"
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    assert "2 documents read (2 added" in r.stdout and "5 paragraphs written" in r.stdout
    info = json.loads(run_cli("info", "--data-dir", str(data), "--json").stdout)
    assert (info["documents"], info["paragraphs"], info["dim"]) == (2, 5, 384)
    assert info["embedder"] == "sentence-transformers/all-MiniLM-L6-v2" and info["index"]["factory"] == "IDMap2,Flat"
    r = run_cli("info", "--data-dir", str(data))
    assert "paragraphs    5" in r.stdout
    r = run_without_torch("info", "--data-dir", str(data))  # which model serves is read from file headers
    assert r.returncode == 0 and "model         general " in r.stdout, r.stdout + r.stderr
    r = run_cli("search", "how long should I knead bread dough", "--data-dir", str(data), "-k", "2")
    assert r.returncode == 0, r.stderr
    assert "cooking.md[1]" in r.stdout.splitlines()[0]
    hits = json.loads(run_cli("search", "how long should I knead bread dough", "--data-dir", str(data), "-k", "2",
                              "--json").stdout)["results"]
    assert [(h["doc_id"], h["position"]) for h in hits][0] == ("cooking.md", 1) and len(hits) == 2
    assert hits[0]["text"].startswith("Knead the dough") and hits[0]["score"] >= hits[1]["score"]
    r = run_cli("build", str(corpus), "--data-dir", str(data))  # a second run reuses everything (the corpus given as
    assert "2 unchanged" in r.stdout and "0 embedded" in r.stdout  # `add FILE` and `rerank-batch INPUT` take theirs)
    r = run_cli("build", str(corpus), "--corpus", "builtin", "--data-dir", str(data), "--no-guard")
    assert r.returncode == 2 and "the corpus given twice" in r.stderr, r.stderr
    report = json.loads(run_cli("build", "--corpus", str(corpus), "--data-dir", str(data), "--json").stdout)
    assert (report["documents_read"], report["documents_unchanged"], report["paragraphs_embedded"]) == (2, 2, 0)
    assert report["data_dir"] == str(data.resolve()) and report["skipped_reasons"] == []
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data), "--batch-paragraphs", "0")  # was taken
    assert r.returncode == 2 and "--batch-paragraphs must be at least 1, got 0" in r.stderr, r.stderr
    r = run_cli("search", "   ", "--data-dir", str(data))  # predict refuses an empty text; search answered it
    assert r.returncode == 2 and "the text to search for is empty" in r.stderr, r.stderr
    r = run_without_torch("info", "--data-dir", str(corpus / "cooking.md"))  # not "build one with --data-dir FILE"
    assert r.returncode == 2 and "cooking.md is a file, not a nextpara data directory" in r.stderr, r.stderr


def test_a_rebuild_names_documents_the_corpus_no_longer_holds_and_prune_deletes_them(tmp_path):
    """A rebuild from a folder a file was removed from kept that file's document without a word (still searchable);
    now the build names such documents on stderr, and --prune deletes them. --prune with malformed lines skipped is
    refused before anything is written: their documents would go as removed."""
    corpus = tmp_path / "notes"
    corpus.mkdir()
    for name in ("a", "b", "c"):
        (corpus / f"{name}.md").write_text(f"The first paragraph of note {name}, long enough to be kept.\n\n"
                                           f"The second paragraph of note {name}, long enough as well.\n")
    data = tmp_path / "store"

    def documents() -> int:
        return json.loads(run_cli("info", "--data-dir", str(data), "--json").stdout)["documents"]

    assert run_cli("build", "--corpus", str(corpus), "--data-dir", str(data)).returncode == 0
    (corpus / "b.md").unlink()
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data))
    assert r.returncode == 0 and "kept 1 stored document(s) the corpus does not hold ('b.md'): this build with " \
        "--prune deletes them" in r.stderr, r.stderr
    assert documents() == 3
    lines = tmp_path / "notes.jsonl"
    lines.write_text(json.dumps({"doc_id": "a.md", "paragraphs": ["The first paragraph of note a, long enough."]})
                     + "\nnot a document\n")
    r = run_cli("build", "--corpus", str(lines), "--data-dir", str(data), "--skip-bad", "--prune")
    assert r.returncode == 2 and "--prune with 1 malformed document(s) skipped" in r.stderr, r.stderr
    assert documents() == 3
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data), "--prune")
    assert r.returncode == 0 and "pruned 1 stored document(s) the corpus does not hold" in r.stdout, r.stdout
    assert documents() == 2
    hits = json.loads(run_cli("search", "the second paragraph of note b", "--data-dir", str(data), "-k", "4",
                              "--json").stdout)["results"]
    assert {h["doc_id"] for h in hits} == {"a.md", "c.md"}


def test_malformed_corpus_line_and_skip_bad(tmp_path):
    docs = write_vector_corpus(tmp_path / "c.jsonl", 3, 2, 8)
    lines = (tmp_path / "c.jsonl").read_text().splitlines()
    lines.insert(1, '{"doc_id": "broken", "paragraphs": ')
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    data = tmp_path / "store"
    r = run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data), "--embedder", "precomputed:rand8")
    assert r.returncode == 2
    assert f"{tmp_path / 'c.jsonl'}:2: not valid JSON" in r.stderr
    assert "nothing was stored: fix it, or build with --skip-bad to skip such documents" in r.stderr, r.stderr
    assert not (data / "paragraphs.sqlite").exists()  # nothing was created
    r = run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data), "--embedder", "precomputed:rand8",
                "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert "1 malformed skipped" in r.stdout and "skipped: " in r.stderr
    assert json.loads(run_cli("info", "--data-dir", str(data), "--json").stdout)["documents"] == len(docs)


def test_precomputed_vectors_dimension_mismatch(tmp_path):
    write_vector_corpus(tmp_path / "a.jsonl", 2, 2, 1536, seed=1)
    write_vector_corpus(tmp_path / "b.jsonl", 2, 2, 768, seed=2)
    data = tmp_path / "store"
    args = ["--data-dir", str(data), "--embedder", "precomputed:ada-002"]
    assert run_cli("build", "--corpus", str(tmp_path / "a.jsonl"), *args).returncode == 0
    r = run_cli("build", "--corpus", str(tmp_path / "b.jsonl"), *args)
    assert r.returncode == 2, r.stderr  # named by its line, as it is read: the store's dimension is what they must have
    assert "b.jsonl:1: document 'doc-00000' has vectors of dimension 768; this store's are of dimension 1536" in r.stderr
    r = run_cli("build", "--corpus", str(tmp_path / "a.jsonl"), "--data-dir", str(data), "--no-guard")
    assert r.returncode == 0 and "2 unchanged" in r.stdout, r.stderr  # a rebuild uses the store's own embedder
    r = run_cli("build", "--corpus", str(tmp_path / "a.jsonl"), "--data-dir", str(data), "--embedder", "minilm")
    assert r.returncode == 2 and "built by embedder 'ada-002' (dim 1536), not 'sentence-transformers/all-MiniLM-L6-v2'" in r.stderr
    r = run_cli("search", "anything", "--data-dir", str(data))
    assert r.returncode == 2 and "cannot embed text" in r.stderr
    assert json.loads(run_cli("info", "--data-dir", str(data), "--json").stdout)["paragraphs"] == 4


def test_bad_training_settings_are_usage_errors(tmp_path):
    """A setting out of range is refused before anything trains, naming the values (exit 2, no traceback)."""
    data = tmp_path / "store"
    write_vector_corpus(tmp_path / "c.jsonl", 3, 2, 8)
    assert run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data),
                   "--embedder", "precomputed:rand8").returncode == 0
    r = run_cli("train", "--data-dir", str(data), "--near-window", "0")
    assert r.returncode == 2 and "error: --near-weight (0.0) must be 0 or more and --near-window (0)" in r.stderr
    r = run_cli("train", "--data-dir", str(data), "--init-shrink", "1.5")
    assert r.returncode == 2 and "error: --init-shrink (1.5) must be between 0 and 1" in r.stderr, r.stderr
    r = run_cli("train", "--data-dir", str(data), "--finetune-phase1-epochs", "-1")
    assert r.returncode == 2 and "error: epochs must be 0 or more" in r.stderr, r.stderr
    assert "--finetune-phase1-epochs -1" in r.stderr, r.stderr
    r = run_cli("train", "--data-dir", str(data), "--finetune-head", "keep")
    assert r.returncode == 2 and "error: --finetune-head 'keep' must be one of auto, train" in r.stderr, r.stderr
    r = run_cli("train", "--data-dir", str(data), "--d-model", "30")
    assert r.returncode == 2 and "model settings: --d-model (30) must be divisible by n_heads (4)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (data / "model.safetensors").exists()


def run_without_torch(*args: str) -> subprocess.CompletedProcess:
    """``nextpara ARGS`` in a process that fails the test if the command imported torch (seconds of imports that
    a command which only reads a store, or refuses its input, should not make its user wait for)."""
    code = ("import sys; from nextpara.__main__ import main; rc = main(sys.argv[1:]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.stdout.splitlines()[-1:] == ["no torch"], r.stdout + r.stderr
    return r


def test_info_on_missing_store_is_a_clear_error(tmp_path):
    r = run_cli("info", "--data-dir", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no nextpara store in" in r.stderr and "nextpara build" in r.stderr


def test_eval_refuses_settings_the_protocol_cannot_run_with_before_loading_anything(tmp_path):
    """No queries, a context length outside 1-8 (a context of 0 read the whole 8 before, one of 20 read 8 and said
    20), nothing to time: refused first, even before the store is looked for."""
    missing = str(tmp_path / "nothing")
    for flags, says in ((["--queries", "0"], "queries (--queries) must be at least 1, got 0"),
                        (["--context-length", "0"], "the context length (--context-length) must be between 1 and 8"),
                        (["--context-length", "9"], "must be between 1 and 8 (the context paragraphs a query holds), got 9"),
                        (["--latency-queries", "-1"], "latency queries (--latency-queries) must be at least 1, got -1")):
        r = run_without_torch("eval", "--data-dir", missing, *flags)
        assert r.returncode == 2 and says in r.stderr and r.stderr.startswith("nextpara eval: error: "), (flags, r.stderr)
    r = run_without_torch("eval", "--data-dir", missing, "--context-length", "8")
    assert r.returncode == 2 and "no nextpara store in" in r.stderr, r.stderr


def test_train_refuses_a_missing_store_and_impossible_settings_before_loading_torch(tmp_path):
    r = run_without_torch("train", "--data-dir", str(tmp_path / "nothing"))
    assert r.returncode == 2 and f"no nextpara store in {tmp_path / 'nothing'}" in r.stderr, r.stderr
    data = tmp_path / "store"
    write_vector_corpus(tmp_path / "c.jsonl", 3, 2, 8)
    assert run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data),
                   "--embedder", "precomputed:rand8", "--no-guard").returncode == 0
    r = run_without_torch("train", "--data-dir", str(data), "--scorer", "fast", "--layers", "1", "--d-model", "30")
    assert r.returncode == 2 and "model settings: --d-model (30) must be divisible by n_heads (4)" in r.stderr, r.stderr
    for flags, says in ((["--batch-size", "0"], "--batch-size must be at least 1, got 0"),  # range() traceback
                        (["--lr", "-1"], "--lr must be above 0 and at most 10, got -1.0"),  # torch's, after the data loaded
                        (["--lr", "nan"], "--lr must be above 0 and at most 10, got nan"),
                        (["--phase2-epochs", "0"], "--phase2-epochs must be at least 1, got 0"),  # a KeyError after the guard
                        (["--val-queries", "0"], "--val-queries must be at least 1, got 0"),  # "too little data"
                        (["--phase2-lr", "-1"], "--phase2-lr must be at least 0 and at most 10, got -1.0")):
        r = run_without_torch("train", "--data-dir", str(data), *flags)
        assert r.returncode == 2 and f"error: {says}" in r.stderr, (flags, r.stderr)
    assert not (data / "model.safetensors").exists()


def test_client_import_loads_no_heavy_library():
    code = ("import sys, nextpara, nextpara.client, nextpara.v1; "
            "heavy = [m for m in ('torch', 'faiss', 'numpy', 'sentence_transformers') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_bare_top_level_modules_installed():
    code = "import importlib.util as u; print([m for m in ('client', 'server', 'proto', 'attention_core') if u.find_spec(m)])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_console_script_and_module_entry_agree():
    script = REPO / ".venv" / "bin" / "nextpara"
    if not script.exists():
        pytest.skip("console script not installed in .venv (run the README's make test)")
    a = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    b = run_cli("--help")
    assert a.returncode == b.returncode == 0 and "build" in a.stdout and a.stdout.split("\n", 1)[1] == b.stdout.split("\n", 1)[1]


@pytest.mark.slow
def test_client_only_install(tmp_path):
    """`pip install nextpara` (no extras) gives a working client and CLI, and heavy commands say what to install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(REPO)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    python = str(venv / "bin" / "python")
    shipped = {p.name for p in venv.glob("lib/python*/site-packages/nextpara/attention_core/*.safetensors")}
    assert shipped == {"general.safetensors", "general_start.safetensors"}  # package data: the two general models
    listed = subprocess.run([python, "-m", "pip", "list"], capture_output=True, text=True).stdout.lower()
    assert not any(name in listed for name in ("torch", "faiss", "numpy", "sentence-transformers"))
    r = subprocess.run([python, "-c", "from nextpara.client import Client, AsyncClient; print('ok')"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout.strip() == "ok", r.stderr
    r = subprocess.run([str(venv / "bin" / "nextpara"), "status", "--address", "127.0.0.1:9", "--timeout", "1"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr
    r = subprocess.run([str(venv / "bin" / "nextpara"), "build", "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "pip install 'nextpara[server]'" in r.stderr


def test_a_training_that_cannot_save_its_model_says_so_and_keeps_what_served(trained_store, tmp_path):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(trained_store, store, ignore=shutil.ignore_patterns("write.lock"))
    before = (store / "model.safetensors").read_bytes()
    (store / "model.safetensors.tmp").mkdir()  # where the checkpoint is written first: the write fails
    r = run_cli("-q", "train", "--data-dir", str(store), "--phase1-epochs", "1", "--phase2-epochs", "1",
                "--val-queries", "50", "--n-candidates", "20", "--d-model", "32", "--layers", "1", "--force")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot write the new model in {store}" in r.stderr and "is still served by" in r.stderr, r.stderr
    assert (store / "model.safetensors").read_bytes() == before
    r = run_cli("-q", "eval", "--data-dir", str(store), "--queries", "5", "--latency-queries", "1",
                "--output", str(tmp_path / "no-such-folder" / "eval.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"the folder {tmp_path / 'no-such-folder'} does not exist" in r.stderr, r.stderr
    r = run_cli("-q", "eval", "--data-dir", str(store), "--queries", "5", "--latency-queries", "1",
                "--output", str(tmp_path))
    assert r.returncode == 2 and f"--output {tmp_path}: a folder; give a file name" in r.stderr, r.stderr
    r = run_cli("-q", "eval", "--data-dir", str(store), "--queries", "5", "--latency-queries", "1",
                "--output", "/dev/full")  # every write fails as on a full disk: found when the results are written
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ("nextpara eval: error: [Errno 28] cannot write the results to /dev/full: No space left on device"
            in r.stderr), r.stderr
    r = run_cli("-q", "eval", "--data-dir", str(store), "--queries", "5", "--latency-queries", "1")  # its tables'
    assert r.returncode == 0 and "only 5 test queries: too few for these figures" in r.stderr, r.stderr  # intervals
    assert "5 test queries, L=4" in r.stdout  # of one query, [1.000, 1.000], said nothing of how little they know


def test_train_and_eval_json(trained_store, tmp_path):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(trained_store, store, ignore=shutil.ignore_patterns("write.lock"))
    r = run_cli("-q", "train", "--data-dir", str(store), "--phase1-epochs", "1", "--phase2-epochs", "1",
                "--val-queries", "50", "--n-candidates", "20", "--d-model", "32", "--layers", "1", "--json")
    assert r.returncode == 0, r.stderr
    trained = json.loads(r.stdout)
    assert trained["trained"] is True and isinstance(trained["served"], bool) and trained["line"]
    assert trained["model"]["model_version"] and "validation" in trained["model"]["metrics"]
    # on a terminal (as a user runs it), embedding the contexts shows its progress: minutes on a large store, silent
    code, out, err = run_on_a_terminal("eval", "--data-dir", str(store), "--queries", "40", "--latency-queries", "3",
                                       "--json")
    assert code == 0, err
    assert re.search(r"embed contexts: 100%.*\| (\d+)/\1 ", err), err
    result = json.loads(out)
    assert result["config"]["queries"] <= 40 and result["config"]["context_length"] == 4
    assert {"B1", "head", "full"} <= set(result["methods"])
    assert set(result["context_length"]["full"]["8"]["change"]) == {"recall@1", "recall@1_ci", "mrr@10", "mrr@10_ci",
                                                                   "queries_given_more", "queries"}


def run_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """``python -m nextpara ARGS`` with its stderr on a pseudo-terminal (where progress bars are drawn), stdout a pipe:
    (exit status, stdout, what the terminal showed)."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # (a new one is 0 columns wide)
    shown = bytearray()

    def drain() -> None:  # (a terminal nobody reads stops its writer when its buffer fills)
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the follower's last holder closed it
                return
            if not data:
                return
            shown.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "nextpara", *args], stdout=subprocess.PIPE, stderr=follower,
                              stdin=subprocess.DEVNULL, timeout=600)
    finally:
        os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    return proc.returncode, proc.stdout.decode(), shown.decode(errors="replace").replace("\r", "\n")


def test_a_reader_that_stops_early_ends_the_command_quietly(trained_store):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "nextpara", "search", "the with statement", "--data-dir",
                             str(trained_store), "-k", "2000", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(10)  # then `| head` goes away, far before the results (beyond a pipe's 64 KB) are written
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "error" not in err, err


def test_eval_says_why_it_cannot_run_before_it_runs(tmp_path):
    """A store with no test query (a traceback), --plot at a file (found after the whole evaluation), and a model there
    that cannot be read (eval gave the baselines alone and exit 0; info showed nothing of the store)."""
    write_vector_corpus(tmp_path / "one.jsonl", 6, 1, 8)  # one paragraph each: no paragraph has one before it
    data = tmp_path / "one"
    assert run_cli("build", "--corpus", str(tmp_path / "one.jsonl"), "--data-dir", str(data),
                   "--embedder", "precomputed:rand8").returncode == 0
    r = run_cli("eval", "--data-dir", str(data))
    assert r.returncode == 2 and f"the test split of {data} holds no queries" in r.stderr and "6 documents" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    write_vector_corpus(tmp_path / "c.jsonl", 40, 4, 8)
    data = tmp_path / "store"
    assert run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data),
                   "--embedder", "precomputed:rand8").returncode == 0
    (tmp_path / "afile").write_text("")
    for plot in ("afile", "afile/sub"):
        r = run_cli("eval", "--data-dir", str(data), "--output", str(tmp_path / "out.json"), "--plot", str(tmp_path / plot))
        assert r.returncode == 2 and f"--plot {tmp_path / plot}: {tmp_path / 'afile'} is a file, not a folder" in r.stderr
        assert not (tmp_path / "out.json").exists()  # refused before anything ran
    r = run_cli("eval", "--data-dir", str(data), "--output", "")  # was taken for none given
    assert r.returncode == 2 and "--output is empty: give a file name" in r.stderr, r.stderr
    r = run_cli("eval", "--data-dir", str(data), "--output", str(tmp_path / "afile" / "out.json"))
    assert r.returncode == 2 and f"{tmp_path / 'afile'} is a file, not a folder" in r.stderr, r.stderr  # "does not exist"
    r = run_cli("eval", "--data-dir", str(data), "--queries", "20", "--latency-queries", "2", "--json",
                "--output", str(tmp_path / "out.json"), "--plot", str(tmp_path / "plots"))
    assert r.returncode == 0, r.stderr  # --json prints what --output writes (it lacked the plots' paths)
    shown = json.loads(r.stdout)
    assert shown == json.loads((tmp_path / "out.json").read_text()) and shown["plots"]
    assert all(os.path.exists(p) for p in shown["plots"])
    (data / "model.safetensors").write_bytes(b"\x00" * 3000)
    r = run_cli("eval", "--data-dir", str(data))
    assert r.returncode == 2 and "model.safetensors is not a nextpara safetensors checkpoint" in r.stderr, r.stderr
    r = run_without_torch("info", "--data-dir", str(data))
    assert r.returncode == 0 and "documents     40" in r.stdout, r.stdout + r.stderr
    assert "model         none: " in r.stdout and "not a nextpara safetensors checkpoint" in r.stdout


def test_train_help_says_what_each_setting_does():
    """Each setting's help was "(default N)" alone: --max-train-queries "(default 0)" and --phase2-lr "(default 0.0)"
    read as no training queries and a learning rate of 0, where 0 means every query and the same rate as --lr."""
    import re
    from dataclasses import fields

    from nextpara.attention_core.train_config import TrainConfig

    r = run_cli("train", "--help")
    assert r.returncode == 0, r.stderr
    options = " ".join(r.stdout.split("options:", 1)[1].split())  # each option's help on one line
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        said = re.search(rf"{flag} (?:{f.name.upper()}|\{{[a-z,]+\}}) (.*?)(?= -{{1,2}}[a-z]|$)", options)
        assert said and not said[1].startswith("(default"), (flag, said and said[1])
    helps = {flag: re.search(rf"{flag} [A-Z_0-9]+ (.*?)\(default", options)[1] for flag in
             ("--max-train-queries", "--phase2-lr")}
    assert "0: every one" in helps["--max-train-queries"] and "0: the same as --lr" in helps["--phase2-lr"]


def test_eval_of_a_store_served_by_plain_cosine_says_its_rows_are_b1s(tmp_path):
    """Where plain cosine serves (here: vectors the general model cannot read), the header said "model <version>
    (cosine)" and the table went on to a "full pipeline (reranked)" row, B1's figures under a reranker's name."""
    write_vector_corpus(tmp_path / "c.jsonl", 40, 4, 8)
    data = tmp_path / "store"
    assert run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data),
                   "--embedder", "precomputed:rand8").returncode == 0
    r = run_cli("-q", "eval", "--data-dir", str(data), "--latency-queries", "1")
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert "plain cosine (B1) serves it (" in header and "rank by cosine to the last paragraph, as B1 does" in header


def test_an_empty_file_in_a_corpus_folder_says_how_to_build_the_rest(tmp_path):
    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nThe first paragraph of a note.\n\nIts second paragraph.\n")
    (corpus / "empty.md").write_text("")
    data = tmp_path / "store"
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data))
    assert r.returncode == 2 and f"{corpus / 'empty.md'}: no paragraphs" in r.stderr, r.stderr
    assert "fix it, or build with --skip-bad to skip such documents" in r.stderr, r.stderr
    assert not data.exists()
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data), "--skip-bad", "--no-guard")
    assert r.returncode == 0 and "1 malformed skipped" in r.stdout, r.stderr
