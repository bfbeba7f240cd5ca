"""What the client commands read: ``add``'s JSON Lines documents and ``predict``'s context, from files, arguments or
stdin (``-``). Bad input raises a NextparaError naming where it is (exit status 2)."""

from __future__ import annotations

import codecs
import json
import os
import sys

from nextpara.errors import json_kind, not_utf8, not_utf8_text

STDIN = "-"


def source_name(path: str) -> str:
    """How messages name an input file: ``<stdin>`` for ``-``."""
    return "<stdin>" if path == STDIN else path


def read_jsonl(path: str, lines: list[int] | None = None):
    """The documents of a JSON Lines file (``-``: stdin), read as they are asked for; a bad line raises
    CorpusFormatError (FILE:LINE: reason, FILE ``<stdin>`` for stdin). The file is opened here, before the stream
    starts. ``lines`` gets each document's line number as it is read."""
    from nextpara.errors import CorpusFormatError, InvalidInputError

    name = source_name(path)
    if path == STDIN:
        f = sys.stdin.buffer
    else:
        if os.path.isdir(path):  # (open's "Is a directory" said nothing of what to do)
            raise InvalidInputError(f"{path} is a folder: add reads one JSON Lines file (FILE.jsonl, or - for stdin); "
                                    "a folder of .txt/.md files is built into the store with `nextpara build "
                                    "--corpus FOLDER`, the server stopped")
        try:
            f = open(path, "rb")
        except OSError as e:
            raise InvalidInputError(f"cannot read {path}: {e.strerror}") from e

    def documents():
        first: dict[str, int] = {}  # each doc_id's line: one file is one write, as `nextpara build` reads it
        with f:
            for lineno, raw in enumerate(f, 1):
                if lineno == 1:  # a byte-order mark is no part of the first document (`nextpara build` reads it so)
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    line = raw.decode("utf-8")
                    doc = parse_document(line) if line.strip() else None
                except UnicodeDecodeError as e:
                    raise CorpusFormatError(name, lineno, not_utf8_text(e, raw if lineno == 1 else b"")) from e
                except ValueError as e:
                    raise CorpusFormatError(name, lineno, str(e)) from e
                if doc is not None:
                    if (at := first.setdefault(doc["doc_id"], lineno)) != lineno:
                        raise CorpusFormatError(name, lineno, f"duplicate doc_id {doc['doc_id']!r} (first at {name}:{at})")
                    if lines is not None:
                        lines.append(lineno)
                    yield doc
    return documents()


def parse_document(line: str) -> dict:
    """One JSON Lines line -> a document for Client.add_documents; ValueError saying what is wrong with it (its
    shape: the server checks the rest, e.g. vector dimensions)."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(doc, dict):
        raise ValueError(f"not a document: a JSON {type(doc).__name__}, not an object")
    doc_id, paragraphs, title, vectors = doc.get("doc_id"), doc.get("paragraphs"), doc.get("title"), doc.get("vectors")
    labels = doc.get("labels")
    title = "" if title is None else title
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
    if "paragraphs" not in doc:
        raise ValueError(f"document {doc_id!r}: missing field paragraphs (a list of strings)")
    if not isinstance(paragraphs, list):  # a lone string was shown as it was, not said to be the wrong kind
        raise ValueError(f"document {doc_id!r}: paragraphs must be a list of strings, got {json_kind(paragraphs)}")
    if not paragraphs:
        raise ValueError(f"document {doc_id!r}: paragraphs must be a non-empty list of strings, got an empty list")
    for i, text in enumerate(paragraphs):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"document {doc_id!r}: paragraph {i} is not a non-empty string")
    if not isinstance(title, str):
        raise ValueError(f"document {doc_id!r}: title must be a string, got {type(title).__name__}")
    if vectors is not None:
        if not isinstance(vectors, list) or len(vectors) != len(paragraphs):
            raise ValueError(f"document {doc_id!r}: vectors must be a list of one vector per paragraph ({len(paragraphs)})")
        for i, v in enumerate(vectors):
            if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                raise ValueError(f"document {doc_id!r}: vector {i} is not a list of numbers")
    if labels is not None and (not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values())):
        raise ValueError(f"document {doc_id!r}: labels must be an object of strings, got {json.dumps(labels)[:60]}")
    texts = [("doc_id", doc_id), ("title", title), *((f"paragraph {i}", t) for i, t in enumerate(paragraphs)),
             *((f"label {k!r:.60}: its {part}", t) for k, v in (labels or {}).items()
               for part, t in (("key", k), ("value", v)))]
    for part, text in texts:
        if (why := not_utf8(text)) is not None:
            raise ValueError(f"document {doc_id!r:.80}: {part} {why}")
    return {"doc_id": doc_id, "title": title, "paragraphs": paragraphs, "vectors": vectors, "labels": labels or {}}


def label_pair(text: str) -> tuple[str, str]:
    """A ``--label KEY=VALUE`` argument (argparse turns its ValueError into a usage error)."""
    key, eq, value = text.partition("=")
    if not eq or not key or not value:
        raise ValueError(f"{text!r} is not KEY=VALUE")
    return key, value


def read_context(items: list) -> list:
    """``predict``'s context, oldest first, from its TEXT arguments and ``--id`` ids in the order given: a text is a
    text whatever it holds (digits too), an id an int; ``-`` stands for stdin's non-blank lines, one paragraph each
    (read once)."""
    from nextpara.errors import InvalidInputError

    if sum(item == STDIN for item in items) > 1:
        raise InvalidInputError("'-' (the context from stdin) can be given once")
    context = []
    for item in items:
        if item == STDIN:
            data = sys.stdin.buffer.read()
            try:
                lines = data.decode("utf-8-sig").splitlines()  # (a byte-order mark is no text)
            except UnicodeDecodeError as e:
                raise InvalidInputError(f"<stdin>: {not_utf8_text(e, data)}") from e
            context += [line.strip() for line in lines if line.strip()]
        else:
            context.append(item)
    if not context:
        raise InvalidInputError("no context: give paragraphs as TEXT arguments, '-' to read them from stdin, or --id")
    return context
