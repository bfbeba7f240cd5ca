"""Every `nextpara` command in the README's shell blocks runs, as written, on a slice of the PEPs corpus."""

import re
import shlex

import pytest

from conftest import PEPS, REPO, run_cli

PEPS_ARG = "../shared/corpora/peps.jsonl"


def readme_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("nextpara "):
                commands.append(shlex.split(line)[1:])
    return commands


def test_readme_shows_commands():
    assert [c[0] for c in readme_commands()] == ["build", "info", "search"]


@pytest.mark.corpus
@pytest.mark.slow
def test_readme_commands_run(peps_path, tmp_path):
    slice_path = tmp_path / "peps-slice.jsonl"
    with open(peps_path) as src:
        slice_path.write_text("".join(line for _, line in zip(range(15), src)))
    data = tmp_path / "peps"
    for args in readme_commands():
        args = [str(slice_path) if a == PEPS_ARG else str(data) if a == "/tmp/peps" else a for a in args]
        r = run_cli(*args)
        assert r.returncode == 0, f"nextpara {' '.join(args)}\n{r.stderr}"
        assert r.stdout.strip(), f"nextpara {' '.join(args)} printed nothing"
        if args[0] == "search":
            assert len(r.stdout.strip().splitlines()) == 5 and "pep-0001" in r.stdout
