"""The layout's arrows: each room imports only the rooms below it (README "Layout").

store <- attention_core <- {server, batch}; the client imports none of them; the package root
(errors, progress, the CLI entry) is shared. Read from the source with ``ast``, so a lazy import
inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT_MODULES = {"nextpara", "nextpara.errors", "nextpara.progress", "nextpara.v1"}  # shared by every room
MAY_IMPORT = {
    "store": {"store"},
    "attention_core": {"attention_core", "store"},
    "server": {"server", "attention_core", "store"},
    "batch": {"batch", "attention_core", "store", "client"},
    "client": {"client"},
}
ROOMS = {"store", "attention_core", "server", "batch", "client"}


def imported_rooms(path: Path, room: str) -> dict[str, int]:
    """Rooms (and the root modules outside ROOT_MODULES) that ``path`` imports, with a line number each."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x (this room) or from ..x (another room)
                names = [f"{room}.{node.module or ''}"] if node.level == 1 else [f"nextpara.{node.module or ''}"]
            else:
                names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(f"{room}."):
                continue
            parts = name.split(".")
            if parts[0] != "nextpara" or ".".join(parts[:2]) in ROOT_MODULES or name == "nextpara":
                continue
            found.setdefault(parts[1] if parts[1] in ROOMS else ".".join(parts[:2]), node.lineno)
    return found


def violations(repo: Path) -> list[str]:
    out = []
    for room, allowed in MAY_IMPORT.items():
        for path in sorted((repo / room).rglob("*.py")):
            for target, line in imported_rooms(path, room).items():
                if target not in allowed:
                    out.append(f"{path.relative_to(repo)}:{line}: {room} imports {target}")
    return out


def test_imports_point_down_the_layout():
    assert violations(REPO) == []


@pytest.mark.parametrize("room, source, target", [
    ("store", "from nextpara.attention_core.model import NextParagraphModel\n", "attention_core"),
    ("store", "def f():\n    from nextpara.server import main\n", "server"),
    ("attention_core", "import nextpara.batch.cli\n", "batch"),
    ("client", "from ..store.store import open_store\n", "store"),
    ("server", "from nextpara.client import Client\n", "client"),
])
def test_the_check_catches_an_upward_import(tmp_path, room, source, target):
    for name in MAY_IMPORT:
        (tmp_path / name).mkdir()
    (tmp_path / room / "bad.py").write_text(source)
    assert violations(tmp_path) == [f"{room}/bad.py:{source.count(chr(10))}: {room} imports {target}"]


def test_every_room_says_what_it_holds_and_may_import():
    for room in [*MAY_IMPORT, "proto/nextpara"]:
        doc = ast.get_docstring(ast.parse((REPO / room / "__init__.py").read_text())) or ""
        assert "may import" in doc.lower(), f"{room}/__init__.py must say what the room holds and may import"
