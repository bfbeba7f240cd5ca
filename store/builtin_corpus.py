"""The built-in default corpus: text that ships with every CPython installation.

Two kinds of documents, in a fixed order so that ids are stable for one interpreter:

* ``topic:<name>``: the interpreter's documentation topics (``pydoc_data.topics``),
  the pages ``help()`` shows for keywords and language features;
* ``module:<dotted.name>``: standard-library module docstrings, read with ``ast`` from
  the source files (nothing is imported, so no module runs): the module docstring, then
  the docstrings of its public classes, functions and methods in source order.

Paragraphs are split at blank lines; headings, interactive examples (``>>>``) and short
fragments (under 5 words or 30 characters, as in the PEPs corpus) are dropped. The
result differs between Python versions, which is why the store records a corpus
fingerprint rather than assuming one.
"""

from __future__ import annotations

import ast
import inspect
import logging
import os
import sysconfig
from typing import Iterator

from .corpus import Document, split_paragraphs

log = logging.getLogger(__name__)

MIN_WORDS, MIN_CHARS = 5, 30
# Parts of the standard library that are tests, tooling or vendored code, not documentation.
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__",
             "ensurepip", "turtledemo", "pydoc_data", "config-3", "tkinter"}
TOPIC, MODULE = "topic:", "module:"  # the doc_id prefixes of the two kinds of built-in document
BUILTIN_PREFIXES = (TOPIC, MODULE)


def keep_paragraph(text: str) -> bool:
    """True for prose worth indexing: long enough and not an interactive example."""
    return len(text) >= MIN_CHARS and len(text.split()) >= MIN_WORDS and not text.startswith((">>>", "..."))


def _blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(indent, lines) of each blank-line-separated block."""
    block: list[str] = []
    for line in text.expandtabs().split("\n") + [""]:
        if line.strip():
            block.append(line)
        elif block:
            yield min(len(l) - len(l.lstrip()) for l in block), block
            block = []


def _clean(text: str) -> list[str]:
    """Prose paragraphs of reST-ish text: literal blocks (after ``::``) and headings dropped."""
    out: list[str] = []
    literal_indent: int | None = None  # indentation of the paragraph that opened a literal block
    for indent, lines in _blocks(text):
        if literal_indent is not None and indent > literal_indent:
            continue
        literal_indent = None
        paragraph = " ".join(split_paragraphs("\n".join(lines), markdown=False))
        if paragraph.endswith("::"):
            literal_indent = indent
            paragraph = paragraph[:-1]
        if paragraph and keep_paragraph(paragraph):
            out.append(paragraph)
    return out


def topic_documents() -> Iterator[Document]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        paragraphs = _clean(topics[name])
        if len(paragraphs) >= 2:
            yield Document(doc_id=f"{TOPIC}{name}", title=name, paragraphs=paragraphs, source=f"pydoc_data.topics[{name!r}]")


def _docstrings(tree: ast.Module) -> Iterator[str]:
    doc = ast.get_docstring(tree)
    if doc:
        yield doc
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            if doc := ast.get_docstring(node):
                yield doc
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and not sub.name.startswith("_"):
                        if doc := ast.get_docstring(sub):
                            yield doc


def stdlib_source_files() -> list[tuple[str, str]]:
    """(dotted module name, path) of the standard library's .py files, sorted."""
    root = sysconfig.get_paths()["stdlib"]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(("config-", "test")))
        for fn in sorted(filenames):
            if not fn.endswith(".py") or fn.startswith("test_"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), root)[:-3].replace(os.sep, ".")
            name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
            found.append((name, os.path.join(dirpath, fn)))
    return sorted(found)


def module_documents() -> Iterator[Document]:
    for name, path in stdlib_source_files():
        if name.startswith("_") or "._" in name:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
        except (SyntaxError, UnicodeDecodeError, OSError) as e:  # a broken file must not stop the build
            log.debug("skipping %s: %s", path, e)
            continue
        paragraphs = [p for doc in _docstrings(tree) for p in _clean(inspect.cleandoc(doc))]
        if len(paragraphs) >= 2:
            yield Document(doc_id=f"{MODULE}{name}", title=name, paragraphs=paragraphs, source=path)


def builtin_documents() -> Iterator[Document]:
    """All built-in documents: topics first, then modules."""
    yield from topic_documents()
    yield from module_documents()
