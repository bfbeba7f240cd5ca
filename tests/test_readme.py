"""Every `nextpara` command in the README's shell blocks, and its Python example, run as written
(on a slice of the PEPs corpus, against a `nextpara serve` the test starts)."""

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import REPO, peps_slice, run_cli
from nextpara.server.process import ServerProcess


def readme_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            for prefix in (".venv/bin/nextpara ", "nextpara "):
                if line.startswith(prefix):
                    commands.append(shlex.split(line[len(prefix):]))
    return commands


def readme_python() -> str:
    return re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S).group(1)


def test_readme_shows_every_command():
    shown = {c[0] for c in readme_commands()}
    assert shown == {"build", "info", "search", "train", "eval", "serve", "status", "predict", "add", "delete",
                     "rerank-batch", "backup"}


@pytest.mark.corpus
@pytest.mark.slow
def test_readme_commands_run(peps_path, tmp_path):
    slice_path = tmp_path / "peps-slice.jsonl"
    slice_path.write_text("".join(peps_slice(peps_path, {"train": 500, "validation": 60, "test": 60})))
    (tmp_path / "more.jsonl").write_text(json.dumps({"doc_id": "pep-9999", "paragraphs": ["A new proposal.", "Its end."],
                                                     "labels": {"tenant": "acme"}}) + "\n")
    paths = {"peps.jsonl": str(slice_path), "/tmp/peps": str(tmp_path / "peps"),
             "/tmp/peps-eval.json": str(tmp_path / "eval.json"), "/tmp/peps-plots": str(tmp_path / "plots"),
             "/tmp/more-docs.jsonl": str(tmp_path / "more.jsonl"), "/tmp/queries.jsonl": str(tmp_path / "queries.jsonl"),
             "/tmp/ranked.jsonl": str(tmp_path / "ranked.jsonl"), "/tmp/ranked-svc.jsonl": str(tmp_path / "ranked-svc.jsonl"),
             "/tmp/peps-backups": str(tmp_path / "backups"), "/tmp/peps-copy": str(tmp_path / "copy")}
    (tmp_path / "queries.jsonl").write_text(json.dumps({"id": "q1", "context": ["PEP 8 is the style guide."]}) + "\n"
                                            + json.dumps({"id": "q2", "context": [1, 2], "candidates": [3, 4, 5]}) + "\n")
    server, address = None, None
    try:
        stage = {"build": 0, "info": 1, "search": 2, "train": 3, "eval": 4, "serve": 5}
        for args in sorted(readme_commands(), key=lambda c: stage.get(c[0], 6)):  # client commands need the server
            args = [paths.get(a, a) for a in args]
            if address:
                args = [address if a == "127.0.0.1:50051" else a for a in args]
            if args[0] == "serve":
                args = ["127.0.0.1:0" if a == "127.0.0.1:50051" else a for a in args]
                server = ServerProcess([*args[1:], "--metrics-address", "127.0.0.1:0"]).start()
                address = server.address
                assert address, "serve did not start"
                continue
            r = run_cli(*args, env={"NEXTPARA_ADDRESS": address or ""})
            assert r.returncode == 0, f"nextpara {' '.join(args)}\n{r.stdout}\n{r.stderr}"
            assert r.stdout.strip(), f"nextpara {' '.join(args)} printed nothing"
            if args[0] == "predict" and "--label" in args:  # only the document the README added carries it
                assert "pep-9999[" in r.stdout and r.stdout.count("pep-") == 1, r.stdout
            if args[0] == "search":
                assert len(r.stdout.strip().splitlines()) == 5
            if args[0] == "rerank-batch":
                out = [json.loads(line) for line in open(args[2])]
                assert [o["id"] for o in out] == ["q1", "q2"] and all(o["results"] for o in out), out
            if args[0] == "backup":  # while the server serves the store
                assert r.stdout.startswith(f"backed up to {tmp_path / 'copy'}: generation ")
            if args[0] == "eval":
                result = json.loads((tmp_path / "eval.json").read_text())
                assert {"B1", "B2", "B3", "B4", "head", "full"} <= set(result["methods"])
                assert (tmp_path / "plots" / "recall_at_k.png").exists()
        code = readme_python().replace("127.0.0.1:50051", address)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "NOT_FOUND" in r.stdout and "UNKNOWN_IDS [1000000000000]" in r.stdout
        assert "DIMENSION_MISMATCH context[1].vector 384" in r.stdout
        assert "\n2 FIELD_REQUIRED\n" in r.stdout  # RerankStream answered the bad request and went on
        assert "['note-1']\n{'tenant': 'acme'}\n" in r.stdout  # the filter searched the tenant's document alone
        assert f"{tmp_path / 'backups'}/nextpara-g" in r.stdout  # the Backup RPC, into the server's --backup-dir
    finally:
        if server:
            server.stop()
