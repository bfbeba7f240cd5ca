import json

import pytest
from nextpara.errors import CorpusFormatError, InvalidInputError
from nextpara.store.corpus import CorpusReader, split_paragraphs


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_keeps_order_and_fields(tmp_path):
    p = write_lines(tmp_path / "c.jsonl", [
        json.dumps({"doc_id": "a", "title": "A", "paragraphs": ["first one here", "second one here"]}),
        "",
        json.dumps({"doc_id": "b", "paragraphs": ["only"], "source": "b.txt", "license": "CC0"}),  # other keys: ignored
    ])
    docs = list(CorpusReader(p))
    assert [d.doc_id for d in docs] == ["a", "b"]
    assert docs[0].paragraphs == ["first one here", "second one here"] and docs[0].title == "A"
    assert docs[1].title == ""


@pytest.mark.parametrize("line, reason", [
    ("{not json", "not valid JSON"),
    (json.dumps({"paragraphs": ["x"]}), "missing field(s) doc_id"),
    (json.dumps({"doc_id": "x", "paragraphs": ["a"], "label": {"tenant": "acme"}}),  # stored without its labels, quietly
     "unknown field 'label' (did you mean 'labels'?)"),
    (json.dumps({"doc_id": "x", "paragraph": ["a"]}), "unknown field 'paragraph' (did you mean 'paragraphs'?)"),
    (json.dumps({"doc_id": "x", "paragraphs": []}), "has no paragraphs"),
    (json.dumps({"doc_id": "x", "paragraphs": "just a string"}), "paragraphs must be a list of strings, got a string"),
    (json.dumps({"doc_id": "x", "paragraphs": None}), "paragraphs must be a list of strings, got null"),
    (json.dumps({"doc_id": "x", "paragraphs": ["ok", 3]}), "paragraph 1 is int"),
    (json.dumps({"doc_id": "x", "paragraphs": ["ok", "  "]}), "paragraph 1 is empty"),
    (json.dumps({"doc_id": "", "paragraphs": ["ok"]}), "doc_id must be a non-empty string"),
    (json.dumps([1, 2]), "expected a JSON object"),
    (json.dumps({"doc_id": "x", "paragraphs": ["a", "b"], "vectors": [[1.0]]}), "2 paragraphs but 1 vectors"),
    ('{"doc_id": "x", "paragraphs": ["a"], "vectors": [[NaN]]}', "NaN or inf"),
    ('{"doc_id": "x", "paragraphs": ["a"], "vectors": [[0, 0.0]]}', "vector 0: vector is all zeros"),  # was: at store time
    ('{"doc_id": "x", "paragraphs": ["a"], "vectors": 5}', "vectors must be a list of vectors, one per paragraph, not int"),
    ('{"doc_id": "x", "paragraphs": ["a", "b \\ud800"]}', "paragraph 1 holds a lone surrogate ('\\ud800' at character 2)"),
    ('{"doc_id": "x\\udfff", "paragraphs": ["a"]}', "doc_id 'x\\udfff' holds a lone surrogate"),
    ('{"doc_id": "x", "title": "\\ud800", "paragraphs": ["a"]}', "title holds a lone surrogate"),
    ('{"doc_id": "x", "paragraphs": ["a"], "labels": {"k": "\\ud800"}}', "its value holds a lone surrogate"),
])
def test_malformed_line_names_file_and_line(tmp_path, line, reason):
    good = json.dumps({"doc_id": "good", "paragraphs": ["fine paragraph"]})
    p = write_lines(tmp_path / "c.jsonl", [good, line, good.replace("good", "good2")])
    with pytest.raises(CorpusFormatError) as err:
        list(CorpusReader(p))
    assert err.value.line == 2 and err.value.path == str(p)
    assert f"{p}:2:" in str(err.value) and reason in str(err.value)
    reader = CorpusReader(p, skip_bad=True)
    assert [d.doc_id for d in reader] == ["good", "good2"]
    assert reader.skipped == 1 and reason in reader.skipped_reasons[0]


def test_invalid_utf8_and_duplicate_ids(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"doc_id": "a", "paragraphs": ["x"]}\n{"doc_id": "\xff", "paragraphs": ["x"]}\n'
                  b'{"doc_id": "a", "paragraphs": ["y"]}\n')
    with pytest.raises(CorpusFormatError, match=r":2: not valid UTF-8"):
        list(CorpusReader(p))
    reader = CorpusReader(p, skip_bad=True)
    assert [d.doc_id for d in reader] == ["a"] and reader.skipped == 2
    assert any("duplicate doc_id 'a'" in r for r in reader.skipped_reasons)


def test_a_byte_order_mark_at_the_start_of_a_jsonl_corpus_is_no_part_of_it(tmp_path):
    """It was refused as "Unexpected UTF-8 BOM (decode using utf-8-sig)" (with --skip-bad its first document was
    dropped), while a folder's text file with one was read; one later in the file is still not JSON."""
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"doc_id": "a", "paragraphs": ["x"]}\n{"doc_id": "b", "paragraphs": ["y"]}\n')
    assert [d.doc_id for d in CorpusReader(p)] == ["a", "b"]
    p.write_bytes(b'{"doc_id": "a", "paragraphs": ["x"]}\n\xef\xbb\xbf{"doc_id": "b", "paragraphs": ["y"]}\n')
    with pytest.raises(CorpusFormatError, match=r":2: not valid JSON"):
        list(CorpusReader(p))


def test_missing_and_unknown_corpus(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        CorpusReader(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(InvalidInputError, match="expected a .jsonl file"):
        list(CorpusReader(tmp_path / "x.csv"))


def test_text_directory_drops_headings_and_code(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text(
        "# Title\n\nFirst paragraph\ncontinues here.\n\n```python\nprint('code')\n\nmore code\n```\n\n## Section\nSecond paragraph.\n")
    (tmp_path / "a.txt").write_text("\ufeffOne.\n\n\n\nTwo\n=====\n\nThree.\r\n")  # a byte-order mark: not text
    (tmp_path / "ignored.csv").write_text("x")
    docs = list(CorpusReader(tmp_path))
    assert [d.doc_id for d in docs] == ["a.txt", "sub/b.md"]
    assert docs[0].paragraphs == ["One.", "Three."]  # reST-underlined heading dropped
    assert docs[1].paragraphs == ["First paragraph continues here.", "Second paragraph."]
    (tmp_path / "empty.md").write_text("# Only a heading\n")
    reader = CorpusReader(tmp_path, skip_bad=True)
    assert len(list(reader)) == 2  # a whole file's problem names the file, not a line 0 of it
    assert reader.skipped_reasons == [f"{tmp_path / 'empty.md'}: no paragraphs after dropping headings and code"]


def test_split_paragraphs_plain_text_keeps_hash_lines():
    assert split_paragraphs("# not a heading in txt\n\nnext", markdown=False) == ["# not a heading in txt", "next"]


def test_builtin_corpus_is_stable_and_clean():
    first = list(CorpusReader("builtin"))
    second = list(CorpusReader("builtin"))
    assert [(d.doc_id, d.paragraphs) for d in first] == [(d.doc_id, d.paragraphs) for d in second]
    ids = [d.doc_id for d in first]
    assert len(ids) == len(set(ids)) and len(first) > 100
    assert any(i.startswith("topic:") for i in ids) and any(i.startswith("module:") for i in ids)
    paragraphs = [p for d in first for p in d.paragraphs]
    assert len(paragraphs) > 3000
    assert not any(p.startswith(">>>") or len(p.split()) < 5 for p in paragraphs)


@pytest.mark.corpus
def test_peps_corpus_reads_whole(peps_path):
    docs = list(CorpusReader(peps_path))
    assert len(docs) == 734
    assert sum(len(d.paragraphs) for d in docs) == 43588


def test_a_line_cut_short_names_the_column_where_it_ends(tmp_path):
    """The error of a JSON line cut short (a truncated write) was at column 1: of the line after it, counting the
    line's newline. It is where the line ends."""
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"doc_id": "a", "paragraphs": ["x"]}\n{"doc_id": "b", "paragraphs": ["y"\n')
    with pytest.raises(CorpusFormatError, match=r":2: not valid JSON \(Expecting ',' delimiter at column 35\)"):
        list(CorpusReader(p))


def test_markdown_drops_headings_but_not_lines_that_start_with_a_hash():
    """A wrapped line beginning "#123" ended the paragraph and was lost with it; a heading needs "# " (CommonMark)."""
    text = ("We fixed the crash reported in issue\n#123 and released it the same day.\n\n# Title\n\n"
            "   ## Indented heading\nBody.\n\n#research #nlp\n\n####### seven hashes\n\n#\n\nEnd.")
    assert split_paragraphs(text) == ["We fixed the crash reported in issue #123 and released it the same day.",
                                      "Body.", "#research #nlp", "####### seven hashes", "End."]


def test_a_code_block_ends_only_at_a_fence_of_its_own_mark():
    """A "~~~" line inside a block opened by three backticks closed it (and the next backtick fence opened one that
    dropped the rest of the file). CommonMark: a fence closes at a run of the same mark, at least as long, alone."""
    text = ("Before.\n\n```sh\necho ~~~\n~~~\nstill code\n``` not a close\n``\n```\n\nAfter one.\n\n"
            "````\n```\ninside four\n````\n\nAfter two.\n\n~~~\ncode\n~~~~\n\nEnd.")
    assert split_paragraphs(text) == ["Before.", "After one.", "After two.", "End."]
    inline = "```x``` starts this line.\n\nAnd the next."  # a backtick after the run: text, no block
    assert split_paragraphs(inline) == ["```x``` starts this line.", "And the next."]


def test_a_tilde_underline_in_a_text_file_is_a_title_s_not_a_code_fence():
    """reST underlines a title with "~~~~" as long as the title: read as a code fence in a .txt file, a longer
    underline followed by shorter ones never closed, and the rest of the file was dropped without a word."""
    text = "Chapter one\n~~~~~~~~~~~\n\nBody one.\n\nSection\n~~~~~~~\n\nBody two.\n\nBody three."
    assert split_paragraphs(text, markdown=False) == ["Body one.", "Body two.", "Body three."]
    assert split_paragraphs("Code:\n~~~\nx = 1\n~~~\n\nAfter.") == ["Code:", "After."]  # Markdown: a fence


def test_a_fence_no_line_closes_opens_no_block_and_front_matter_is_dropped(monkeypatch):
    """A "~~~~" scene break between paragraphs of a text file opened a code block no line closed: the rest of the
    file was dropped without a word. And TOML front matter ("+++" lines, Hugo's) was stored as a paragraph."""
    story = "First part.\n\n~~~~~~~~\n\nSecond part.\n\nThird."
    assert split_paragraphs(story, markdown=False) == ["First part.", "Second part.", "Third."]
    breaks = "A\n\n~~~~\n\nB\n\n~~~~\n\nC\n\n~~~~\n\nD"  # two of them read as a block dropped B
    assert split_paragraphs(breaks, markdown=False) == ["A", "B", "C", "D"]
    assert split_paragraphs(story) == ["First part.", "Second part.", "Third."]  # in Markdown, dropped as a rule
    assert split_paragraphs("Intro.\n\n```python\nnever closed\n\nLast.") == ["Intro.", "```python never closed",
                                                                                "Last."]
    from nextpara.store import corpus

    matched = []

    class Counting:  # each pass re-read the file: 3,000 unclosable fences took 3,000 passes, seconds
        def match(self, line):
            matched.append(line)
            return FENCE.match(line)

    FENCE = corpus._FENCE
    monkeypatch.setattr(corpus, "_FENCE", Counting())
    many = "\n".join(f"```a {i}" for i in range(3000))
    assert split_paragraphs(many) == [" ".join(f"```a {i}" for i in range(3000))]
    assert len(matched) <= 3 * 3000, len(matched)
    monkeypatch.undo()
    for mark, body, close in (("+++", 'title = "Notes"\ndate = 2024-01-01', "+++"),
                              ("---", "title: Notes\ndate: 2024-01-01", "---"), ("---", "# a comment\ntitle: x", "...")):
        assert split_paragraphs(f"{mark}\n{body}\n{close}\n\nBody text.\n\nMore.") == ["Body text.", "More."]
    rule = "---\n\nIntro paragraph.\n\nSection title\n---\n\nBody."  # a leading rule is no front matter
    assert split_paragraphs(rule) == ["Intro paragraph.", "Body."]
    rule = "---\nIntro paragraph.\n\nSection title\n---\n\nBody."  # nor is one followed by text
    assert split_paragraphs(rule) == ["Intro paragraph.", "Body."]


def test_hidden_files_and_folders_of_a_corpus_folder_are_skipped(tmp_path):
    """A notes folder copied from a Mac to a foreign disk holds ._name.md (binary AppleDouble) beside each note: the
    build stopped at it, not UTF-8. Nor are an editor's .trash/ or a .git/ folder the corpus."""
    (tmp_path / "note.md").write_text("A note.\n\nIts second paragraph.\n")
    (tmp_path / "._note.md").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        \xff\xfe")
    (tmp_path / ".trash").mkdir()
    (tmp_path / ".trash" / "deleted.md").write_text("A deleted note.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.txt").write_text("Another note.\n")
    assert [d.doc_id for d in CorpusReader(tmp_path)] == ["note.md", "sub/other.txt"]
    hidden = tmp_path / ".only"
    hidden.mkdir()
    (hidden / ".x.md").write_text("hidden\n")
    with pytest.raises(InvalidInputError, match="holds no .txt or .md files"):
        list(CorpusReader(hidden))


def test_a_text_file_the_store_would_refuse_is_malformed_as_it_is_read(tmp_path):
    """A UTF-16 file without a byte-order mark decodes as UTF-8 with a NUL after every letter. Its document was not
    checked until the build embedded it: the build stopped there after storing the batches before it, and --skip-bad
    did not skip it."""
    (tmp_path / "a.txt").write_text("A good paragraph.\n")
    (tmp_path / "b.txt").write_bytes("Hello world.\n\nAnother one.\n".encode("utf-16-le"))
    with pytest.raises(CorpusFormatError, match=r"b\.txt: .*contains a NUL character"):
        list(CorpusReader(tmp_path))
    reader = CorpusReader(tmp_path, skip_bad=True)
    assert [d.doc_id for d in reader] == ["a.txt"] and reader.skipped == 1


def test_a_markdown_thematic_break_keeps_the_paragraph_above_it():
    text = "# Notes\n\nThe first paragraph, just above a rule.\n***\n\nThe second.\n\n* * *\n\nThe third.\n___\nThe fourth."
    assert split_paragraphs(text) == ["The first paragraph, just above a rule.", "The second.", "The third.",
                                      "The fourth."]  # the first was dropped as a heading title, "* * *" kept as text
    assert split_paragraphs("Title\n=====\n\nBody.\n\nSub\n-----\n\nMore.") == ["Body.", "More."]  # setext headings
    assert split_paragraphs("Kept +++ here.\n+++\n\nNext.") == ["Kept +++ here. +++", "Next."]  # no Markdown underline
    assert split_paragraphs("Title\n*****\n\nBody.", markdown=False) == ["Body."]  # reST's marks, in a .txt


def test_a_file_in_another_encoding_says_which_and_what_to_do(tmp_path):
    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "windows.txt").write_bytes("A note saved as Unicode.\n\nIts second paragraph.\n".encode("utf-16"))
    (corpus / "latin1.md").write_bytes("Caf\xe9 cr\xe8me.\n".encode("latin-1"))
    (corpus / "ok.md").write_text("Fine.\n")
    reader = CorpusReader(corpus, skip_bad=True)
    assert [d.doc_id for d in reader] == ["ok.md"]
    latin1, windows = reader.skipped_reasons
    assert latin1.endswith("latin1.md: not valid UTF-8 (invalid continuation byte at byte 3): convert it to UTF-8 "
                           "(from the encoding it was written in, e.g. Latin-1 or Windows-1252)"), latin1
    assert windows.endswith("windows.txt: not valid UTF-8 (invalid start byte at byte 0): it is UTF-16 (its byte-order "
                            "mark says so); convert it to UTF-8"), windows
    (tmp_path / "docs.jsonl").write_bytes('{"doc_id": "a", "paragraphs": ["One."]}\n'.encode("utf-16"))
    with pytest.raises(CorpusFormatError, match=r"docs.jsonl:1: not valid UTF-8 .*: it is UTF-16"):
        list(CorpusReader(tmp_path / "docs.jsonl"))
