"""The CLI as a user runs it: build, info, search, bad corpora; and the packaging promises."""

import json
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
    r = run_cli("search", "how long should I knead bread dough", "--data-dir", str(data), "-k", "2")
    assert r.returncode == 0, r.stderr
    assert "cooking.md[1]" in r.stdout.splitlines()[0]
    r = run_cli("build", "--corpus", str(corpus), "--data-dir", str(data))  # a second run reuses everything
    assert "2 unchanged" in r.stdout and "0 embedded" in r.stdout


def test_malformed_corpus_line_and_skip_bad(tmp_path):
    docs = write_vector_corpus(tmp_path / "c.jsonl", 3, 2, 8)
    lines = (tmp_path / "c.jsonl").read_text().splitlines()
    lines.insert(1, '{"doc_id": "broken", "paragraphs": ')
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    data = tmp_path / "store"
    r = run_cli("build", "--corpus", str(tmp_path / "c.jsonl"), "--data-dir", str(data), "--embedder", "precomputed:rand8")
    assert r.returncode == 2
    assert f"{tmp_path / 'c.jsonl'}:2: not valid JSON" in r.stderr
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
    assert r.returncode == 2 and "dimension 1536, not 768" in r.stderr
    r = run_cli("build", "--corpus", str(tmp_path / "a.jsonl"), "--data-dir", str(data))
    assert r.returncode == 2 and "built by embedder 'ada-002' (dim 1536), not 'sentence-transformers/all-MiniLM-L6-v2'" in r.stderr
    r = run_cli("search", "anything", "--data-dir", str(data))
    assert r.returncode == 2 and "cannot embed text" in r.stderr
    assert json.loads(run_cli("info", "--data-dir", str(data), "--json").stdout)["paragraphs"] == 4


def test_info_on_missing_store_is_a_clear_error(tmp_path):
    r = run_cli("info", "--data-dir", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no nextpara store in" in r.stderr and "nextpara build" in r.stderr


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
    listed = subprocess.run([python, "-m", "pip", "list"], capture_output=True, text=True).stdout.lower()
    assert not any(name in listed for name in ("torch", "faiss", "numpy", "sentence-transformers"))
    r = subprocess.run([python, "-c", "from nextpara.client import Client, AsyncClient; print('ok')"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout.strip() == "ok", r.stderr
    r = subprocess.run([str(venv / "bin" / "nextpara"), "status", "--address", "127.0.0.1:9", "--timeout", "1"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "UNAVAILABLE" in r.stderr
    r = subprocess.run([str(venv / "bin" / "nextpara"), "build", "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "pip install 'nextpara[server]'" in r.stderr
