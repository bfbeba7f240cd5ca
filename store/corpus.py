"""Read documents as ordered paragraphs.

Three sources, one shape (:class:`Document`):

* JSON Lines, one document per line, the format of the project's PEPs corpus:
  ``{"doc_id": "...", "title": "...", "paragraphs": ["...", ...]}``; an optional
  ``"vectors": [[float, ...], ...]`` (one per paragraph) carries precomputed embeddings, an optional
  ``"labels": {"tenant": "acme", ...}`` the document's labels (labels.py). Other keys are ignored, except a field it
  lacks spelt another way (``"label"``, errors.misspelt_field): malformed, since ignoring it would lose what it holds.
* A directory of ``.txt`` / ``.md`` files: one document per file (doc_id = path relative
  to the directory; files and folders whose names begin with ``.`` are skipped), paragraphs separated by blank
  lines; markdown headings and fenced code blocks are dropped.
* ``builtin``: the default corpus made from the running interpreter (see builtin_corpus.py).

Paragraph order inside a document is kept; a paragraph's stable identity is
(doc_id, position). A malformed line raises :class:`CorpusFormatError` naming file and
line, unless the reader was made with ``skip_bad=True``, which counts it in ``skipped``.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from nextpara.errors import (
    CorpusFormatError,
    InvalidInputError,
    Reason,
    json_kind,
    misspelt_field,
    not_utf8,
    not_utf8_text,
)

from .labels import check_labels
from .unit_vectors import unit_rows

BUILTIN = "builtin"
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
MAX_DOC_ID_CHARS = 512


def text_hash(text: str) -> str:
    """The identity of a paragraph's text: sha256 of its UTF-8 bytes, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Document:
    """One document: its id, title, paragraphs in reading order and labels."""

    doc_id: str
    paragraphs: list[str]
    title: str = ""
    vectors: Sequence[Sequence[float]] | None = None  # one per paragraph, when precomputed
    source: str = field(default="", compare=False)  # "file:line" it came from, for messages
    request_path: str = field(default="", compare=False)  # where a request holds it ("documents[2]"), for errors
    labels: dict[str, str] = field(default_factory=dict)  # string -> string, e.g. {"tenant": "acme"}


def validate_document(doc: Document, where: str = "", dim: int | None = None, embedder: str = "") -> None:
    """Raise InvalidInputError if ``doc`` cannot be stored; ``where`` prefixes the message. The error's reason says
    what is wrong, and its field where (under ``doc.request_path``, when the document came in a request).

    Its vectors pass the store's own check (unit_vectors.unit_rows: a zero vector, a value float32 cannot hold, rows
    of different lengths), so that a corpus line the store would refuse is refused as it is read, with its FILE:LINE;
    ``dim`` (of the embedder named ``embedder``), when known, is the dimension they must have."""
    at = f"{where}: " if where else ""

    def bad(message: str, reason: Reason, part: str) -> InvalidInputError:
        return InvalidInputError(at + message, reason=reason, field=f"{doc.request_path}.{part}" if doc.request_path else None)

    if not isinstance(doc.doc_id, str) or not doc.doc_id.strip():
        raise bad(f"doc_id must be a non-empty string, got {doc.doc_id!r}", Reason.FIELD_REQUIRED, "doc_id")
    if (why := not_utf8(doc.doc_id)) is not None:
        raise bad(f"doc_id {doc.doc_id!r} {why}", Reason.INVALID_TEXT, "doc_id")
    if len(doc.doc_id) > MAX_DOC_ID_CHARS:
        raise bad(f"doc_id is {len(doc.doc_id)} characters, at most {MAX_DOC_ID_CHARS}", Reason.OUT_OF_RANGE, "doc_id")
    if isinstance(doc.title, str) and (why := not_utf8(doc.title)) is not None:
        raise bad(f"document {doc.doc_id!r} title {why}", Reason.INVALID_TEXT, "title")
    if not isinstance(doc.paragraphs, list) or not doc.paragraphs:
        raise bad(f"document {doc.doc_id!r} has no paragraphs", Reason.FIELD_REQUIRED, "paragraphs")
    for i, text in enumerate(doc.paragraphs):
        if not isinstance(text, str):
            raise bad(f"document {doc.doc_id!r} paragraph {i} is {type(text).__name__}, not a string", Reason.INVALID_TEXT,
                      f"paragraphs[{i}]")
        if not text.strip():
            raise bad(f"document {doc.doc_id!r} paragraph {i} is empty", Reason.INVALID_TEXT, f"paragraphs[{i}]")
        if "\x00" in text:
            raise bad(f"document {doc.doc_id!r} paragraph {i} contains a NUL character", Reason.INVALID_TEXT,
                      f"paragraphs[{i}]")
        if (why := not_utf8(text)) is not None:
            raise bad(f"document {doc.doc_id!r} paragraph {i} {why}", Reason.INVALID_TEXT, f"paragraphs[{i}]")
    doc.labels = check_labels(doc.labels, f"{doc.request_path}.labels" if doc.request_path else None,
                 f"{where + ': ' if where else ''}document {doc.doc_id!r:.80}")
    if doc.vectors is not None:
        if not isinstance(doc.vectors, (list, tuple)):
            raise bad(f"document {doc.doc_id!r} vectors must be a list of vectors, one per paragraph, not "
                      f"{type(doc.vectors).__name__}", Reason.INVALID_VECTOR, "vectors")
        if len(doc.vectors) != len(doc.paragraphs):
            raise bad(f"document {doc.doc_id!r} has {len(doc.paragraphs)} paragraphs but {len(doc.vectors)} vectors",
                      Reason.INVALID_VECTOR, "vectors")
        for i, vec in enumerate(doc.vectors):
            if not isinstance(vec, (list, tuple)) or not vec:
                raise bad(f"document {doc.doc_id!r} vector {i} is not a non-empty list of numbers", Reason.INVALID_VECTOR,
                          f"vectors[{i}]")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
                raise bad(f"document {doc.doc_id!r} vector {i} has a non-numeric value", Reason.INVALID_VECTOR,
                          f"vectors[{i}]")
        unit_rows(doc.vectors, dim, embedder=embedder, name=lambda i: f"{at}document {doc.doc_id!r} vector {i}",
                  field=(lambda i: f"{doc.request_path}.vectors[{i}]") if doc.request_path else None)


def _document_from_json(obj: object) -> Document:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if (why := misspelt_field(obj)) is not None:
        raise ValueError(why)
    missing = [k for k in ("doc_id", "paragraphs") if k not in obj]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    title = obj.get("title") or ""
    if not isinstance(title, str):
        raise ValueError(f"title must be a string, got {type(title).__name__}")
    if not isinstance(obj["paragraphs"], list):  # a lone string was "has no paragraphs", as if it were empty
        raise ValueError(f"paragraphs must be a list of strings, got {json_kind(obj['paragraphs'])}")
    labels = obj.get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise ValueError(f"labels must be an object of strings, got {type(labels).__name__}")
    return Document(doc_id=obj["doc_id"], paragraphs=obj["paragraphs"], title=title, vectors=obj.get("vectors"),
                    labels=labels or {})


class CorpusReader:
    """Iterate the documents of a corpus path (JSONL file, directory, or ``builtin``).

    ``skipped`` counts malformed documents passed over when ``skip_bad`` is set; read it
    after iterating. Duplicate doc_ids within one corpus are malformed too.
    """

    def __init__(self, path: str | os.PathLike, skip_bad: bool = False):
        self.path = str(path)
        self.skip_bad = skip_bad
        self.skipped = 0
        self.skipped_reasons: list[str] = []
        if self.path != BUILTIN and not os.path.exists(self.path):
            raise InvalidInputError(f"corpus {self.path!r} does not exist")

    def __iter__(self) -> Iterator[Document]:
        seen: dict[str, str] = {}
        for doc in self._documents():
            if doc.doc_id in seen:
                self.reject(InvalidInputError(f"{doc.source}: duplicate doc_id {doc.doc_id!r} (first at {seen[doc.doc_id]})"))
                continue
            seen[doc.doc_id] = doc.source
            yield doc

    def reject(self, error: Exception) -> None:
        """A malformed document (``error`` names its FILE:LINE and what is wrong): raised, or with ``skip_bad``
        counted in ``skipped`` and said in ``skipped_reasons``. Public for what only a build can judge (ingest.py:
        vectors of another dimension than the others', none where the embedder cannot embed text)."""
        if not self.skip_bad:
            error.malformed_document = True  # (the build command says what to do: fix it, or --skip-bad)
            raise error
        self.skipped += 1
        if len(self.skipped_reasons) < 20:
            self.skipped_reasons.append(str(error))

    def _documents(self) -> Iterator[Document]:
        if self.path == BUILTIN:
            from .builtin_corpus import builtin_documents

            yield from builtin_documents()
        elif os.path.isdir(self.path):
            yield from self._read_dir(Path(self.path))
        elif self.path.endswith((".jsonl", ".json", ".ndjson")):
            yield from self._read_jsonl(self.path)
        elif self.path.endswith(TEXT_SUFFIXES):
            yield from self._read_text_files(Path(self.path).parent, [Path(self.path)])
        else:
            raise InvalidInputError(
                f"corpus {self.path!r}: expected a .jsonl file, a directory of .txt/.md files, or 'builtin'"
            )

    def _read_jsonl(self, path: str) -> Iterator[Document]:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno == 1:  # a byte-order mark is no part of the first document (as for a folder's text files)
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                if not raw.strip():
                    continue
                try:
                    doc = _document_from_json(json.loads(raw.decode("utf-8").rstrip("\r\n")))  # (a line cut short:
                    # its error's column is at its end, not at column 1 of the next line)
                    doc.source = f"{path}:{lineno}"
                    validate_document(doc)
                except UnicodeDecodeError as e:
                    self.reject(CorpusFormatError(path, lineno, not_utf8_text(e, raw if lineno == 1 else b"")))
                    continue
                except json.JSONDecodeError as e:
                    self.reject(CorpusFormatError(path, lineno, f"not valid JSON ({e.msg} at column {e.colno})"))
                    continue
                except (ValueError, TypeError, ArithmeticError) as e:  # (an OverflowError of json's too)
                    self.reject(CorpusFormatError(path, lineno, str(e)))
                    continue
                yield doc

    def _read_dir(self, root: Path) -> Iterator[Document]:
        # hidden files and folders are not the corpus: an editor's or a sync tool's (.trash/, .git/, macOS's binary
        # ._name.md beside each file copied to a foreign disk, which stopped the build as not UTF-8)
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
        if not files:
            raise InvalidInputError(f"corpus directory {str(root)!r} holds no .txt or .md files (outside hidden ones)")
        yield from self._read_text_files(root, files)

    def _read_text_files(self, root: Path, files: list[Path]) -> Iterator[Document]:
        for path in files:
            data = path.read_bytes()
            try:
                text = data.decode("utf-8-sig")  # a byte-order mark is no part of the first paragraph
            except UnicodeDecodeError as e:
                self.reject(CorpusFormatError(str(path), 0, not_utf8_text(e, data)))
                continue
            paragraphs = split_paragraphs(text, markdown=path.suffix.lower() != ".txt")
            if not paragraphs:
                self.reject(CorpusFormatError(str(path), 0, "no paragraphs after dropping headings and code"))
                continue
            doc = Document(doc_id=path.relative_to(root).as_posix(), paragraphs=paragraphs, title=path.stem,
                           source=str(path))
            try:  # as a JSON line is: a file the store would refuse (a NUL character) is malformed as it is read
                validate_document(doc)
            except InvalidInputError as e:
                self.reject(CorpusFormatError(str(path), 0, str(e)))
                continue
            yield doc


_HEADING_UNDERLINE = re.compile(r"^\s*([=\-~*^#+])\1{2,}\s*$")  # reST's marks (a .txt)
_MD_UNDERLINE = re.compile(r"^\s*([=\-])\1{2,}\s*$")  # Markdown's (setext): "=" and "-" alone
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")  # CommonMark's "***", "* * *", "___", "- - -"
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")  # CommonMark's: "#123 ..." or "#tag" is a line of text
# A code fence as CommonMark has it (closed only by a run of the same mark at least as long, alone on its line; a
# backtick run followed by another backtick on its line is text: "```x``` starts this line"), at any indentation,
# since a list item's code is indented further than CommonMark's three spaces outside one.
_FENCE = re.compile(r"^\s*(`{3,}(?!.*`)|~{3,})")


def split_paragraphs(text: str, markdown: bool = True) -> list[str]:
    """Split text into paragraphs at blank lines; drop headings and fenced code blocks.

    Lines inside a paragraph are joined with single spaces. With ``markdown``, ATX headings
    (one to six ``#`` then a space or the line's end, indented at most three spaces) are
    dropped; a line that merely starts with ``#`` (``#123 was fixed``, a ``#tag``) is text; a heading underlined
    with ``=`` or ``-`` is dropped, and a thematic break (``***``, ``* * *``, ``___``) ends a paragraph and is dropped;
    so is front matter (from the first line, YAML's between ``---`` and ``---`` or ``...``, TOML's between ``+++``
    lines, its first line a key or a comment: a leading rule is no front matter).
    Without it (plain text), headings underlined reST-style (``=``, ``-``, ``~``, ``*``, ``^``, ``#``, ``+``) are
    dropped, and only backtick fences open code blocks (a ``~~~~`` line is an underline, a transition or a scene
    break there: as a fence, two of them dropped what was between them). A fence that no later line could close
    opens no block (CommonMark would drop the rest of the file); alone on its line, it is dropped as a rule is.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if markdown:
        lines = lines[_front_matter_lines(lines):]
    paragraphs: list[str] = []
    current: list[str] = []
    fence = ""  # the run of marks that opened the code block we are in
    marks = [_FENCE.match(line) for line in lines]
    closable = _closing_runs(lines, marks)

    def flush() -> None:
        if current:
            joined = " ".join(" ".join(current).split())
            if joined:
                paragraphs.append(joined)
            current.clear()

    for n, (line, mark) in enumerate(zip(lines, marks)):
        if fence:  # a "~~~" inside a "```" block (or a shorter run, or one followed by text) is a line of the code
            if mark and mark[1][0] == fence[0] and len(mark[1]) >= len(fence) and not line[mark.end():].strip():
                fence = ""
            continue
        if mark and not markdown and mark[1][0] == "~":
            mark = None  # (a reST underline, a transition or a scene break: read below)
        if mark and closable[n][mark[1][0]] < len(mark[1]):  # no later line closes it: no code block
            if not line[mark.end():].strip():
                flush()
                continue
            mark = None
        if mark:
            flush()
            fence = mark[1]
            continue
        if not line.strip():
            flush()
            continue
        if markdown and _ATX_HEADING.match(line):
            flush()
            continue
        if (_MD_UNDERLINE if markdown else _HEADING_UNDERLINE).match(line):
            current.clear()  # the line above was a heading title
            continue
        if markdown and _THEMATIC_BREAK.match(line):  # a rule between paragraphs ("***" under a paragraph is no
            flush()  # underline in Markdown: it was taken for one, and the paragraph above it was dropped)
            continue
        current.append(line.strip())
    flush()
    return paragraphs


def _closing_runs(lines: list[str], marks: list) -> list[dict[str, int]]:
    """For each line, the longest run of each fence mark alone on a later line: what could close a block it opens
    (``marks``: each line's _FENCE match)."""
    best = {"`": 0, "~": 0}
    out = []
    for line, mark in zip(reversed(lines), reversed(marks)):
        out.append(dict(best))
        if mark and not line[mark.end():].strip():
            best[mark[1][0]] = max(best[mark[1][0]], len(mark[1]))
    return out[::-1]


_YAML_KEY = re.compile(r"^(#|[\w\"'-][^:]*:(\s|$))")  # a front matter block's first line: a key or a comment
_TOML_KEY = re.compile(r"^\s*([\w.\"-]+\s*=|\[|#)")


def _front_matter_lines(lines: list[str]) -> int:
    """How many lines a front matter block takes at the start of ``lines`` (0 if none): its first line a key (or a
    comment), as Pandoc, which parses the block, would take it; a leading rule followed by text is no front matter."""
    if len(lines) < 3 or lines[0].rstrip() not in ("---", "+++"):
        return 0
    if not (_YAML_KEY if lines[0].rstrip() == "---" else _TOML_KEY).match(lines[1]):
        return 0
    closers = ("---", "...") if lines[0].rstrip() == "---" else ("+++",)
    return next((i + 1 for i in range(1, len(lines)) if lines[i].rstrip() in closers), 0)
