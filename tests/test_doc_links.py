"""Every relative link in the repository's Markdown resolves: its file exists, and its #anchor names a heading there.

Links are ``[text](target)`` (images too) and reference definitions ``[label]: target``, outside fenced code
blocks and inline code; targets with a scheme (https:, mailto:, ...) are not checked. An anchor is compared with
the GitHub-style slug of each heading of the target Markdown file (lowercased, characters other than letters,
digits, spaces, hyphens and underscores dropped, spaces made hyphens; a repeated heading gets -1, -2, ...).
Standard library only, so it runs in well under a second.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)  # not across a blank line
TITLE = r"(?:\"[^\"]*\"|'[^']*'|\([^()]*\))"
DESTINATION = r"(<[^<>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*" + DESTINATION + r"(?:\s+" + TITLE + r")?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*" + DESTINATION + r"(?:[ \t]+" + TITLE + r")?[ \t]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.I)


def markdown_files(repo: Path) -> list[Path]:
    """The repository's Markdown files: tracked ones and new ones not yet added (ignored files left out)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                         cwd=repo, capture_output=True, text=True, check=True).stdout
    return sorted({repo / line for line in out.splitlines() if (repo / line).is_file()})


def prose(text: str) -> tuple[str, list[str]]:
    """``text`` with fenced code blocks and inline code blanked (every offset kept), and its lines outside fences."""
    lines, fence = text.split("\n"), None
    outside = []
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m:
            fence, lines[i] = m.group(1), " " * len(line)
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip().strip(fence[0]):
                fence = None
            lines[i] = " " * len(line)
        else:
            outside.append(line)
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(lines)), outside


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for line in prose(text)[1]:
        m = HEADING.match(line)
        if m:
            base = slug(m.group(1) or "")
            name = base if base not in seen else f"{base}-{seen[base]}"
            seen[base] = seen.get(base, 0) + 1
            found.add(name)
    return found | set(HTML_ANCHOR.findall(text))


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path`` outside code."""
    text = prose(path.read_text(encoding="utf-8"))[0]
    found = [m for pattern in (LINK, DEFINITION) for m in pattern.finditer(text)]
    return sorted((text.count("\n", 0, m.start(1)) + 1, m.group(1).strip("<>")) for m in found)


def broken_links(repo: Path, files: list[Path]) -> list[str]:
    """``file:line: target`` for each relative link among ``files`` whose file or heading is missing, or whose file
    is outside ``repo`` (the repository explains itself: nothing in it cites a file it does not hold)."""
    out, cache, root = [], {}, repo.resolve()
    for path in files:
        for line, target in links(path):
            if not target or SCHEME.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / unquote(file_part)).resolve() if file_part else path
            if dest.is_dir() and anchor:
                dest = dest / "README.md"
            ok = dest.exists() and dest.is_relative_to(root)
            if ok and anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                ok = unquote(anchor) in cache[dest]
            if not ok:
                out.append(f"{path.relative_to(repo)}:{line}: {target}")
    return out


def test_every_relative_link_resolves():
    files = markdown_files(REPO)
    assert REPO / "README.md" in files and REPO / "bench" / "README.md" in files
    broken = broken_links(REPO, files)
    assert not broken, "links to a missing file or heading:\n" + "\n".join(broken)


@pytest.mark.parametrize("heading, expected", [
    ("Direction: reading the seam", "direction-reading-the-seam"),
    ("Where training pays, by corpus size", "where-training-pays-by-corpus-size"),
    ("Quality (`bench/quality/`)", "quality-benchquality"),
    ("The [general model](x.md) and fine_tuning", "the-general-model-and-fine_tuning"),
    ("Stage-1 recall", "stage-1-recall"),
])
def test_slug(heading, expected):
    assert slug(heading) == expected


GOOD = """# Title

## Part one

See [part one](#part-one), [the other file](other.md#a-heading), [again](other.md#a-heading-1),
[a folder](sub), [the web](https://example.com/x.md#nowhere), [mail](mailto:a@b.c) and ![a picture](sub/p.png).
`[not a link](missing.md)` and

```sh
[not a link either](missing.md)
# not a heading
```

[label]: other.md#part-two
"""


@pytest.mark.parametrize("line, bad", [
    ("[a missing file](missing.md)", "missing.md"),
    ("[a missing heading](other.md#no-such-heading)", "other.md#no-such-heading"),
    ("[a heading in code](#not-a-heading)", "#not-a-heading"),
    ("[a third copy](other.md#a-heading-2)", "other.md#a-heading-2"),
    ("[one level up](../other.md)", "../other.md"),
    ("[ref]: gone.md", "gone.md"),
    ("text [across\nlines](sub/gone.md)", "sub/gone.md"),
])
def test_the_check_catches_a_broken_link(tmp_path, line, bad):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "p.png").write_bytes(b"")
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n\n## A heading\n\n## Part two\n")
    doc = tmp_path / "doc.md"
    doc.write_text(GOOD)
    assert broken_links(tmp_path, [doc, tmp_path / "other.md"]) == []
    doc.write_text(GOOD + "\n" + line + "\n")
    assert broken_links(tmp_path, [doc]) == [f"doc.md:{GOOD.count(chr(10)) + 2 + line.count(chr(10))}: {bad}"]


def test_a_link_out_of_the_repository_is_broken_even_where_the_file_exists(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n")
    (repo / "doc.md").write_text("[out](../outside.md) and [in](doc.md)\n")
    assert broken_links(repo, [repo / "doc.md"]) == ["doc.md:1: ../outside.md"]
