"""A context longer than the model reads: its oldest paragraphs are dropped for the model, but they are still the
caller's paragraphs. The proto says they are never predicted and that bad items are refused; both held only for the
paragraphs the model read. A real MiniLM store served by the general model on 127.0.0.1, through the client library."""

import json

import pytest
from conftest import LiveServer
from nextpara.client import Client, InvalidArgument, NotFound

TOPICS = ["river", "mountain", "harbour", "library", "orchard", "glacier"]


@pytest.fixture(scope="module")
def general_server(tmp_path_factory):
    from nextpara.store.ingest import build

    root = tmp_path_factory.mktemp("dropped")
    with open(root / "corpus.jsonl", "w") as f:
        for topic in TOPICS:
            f.write(json.dumps({"doc_id": topic, "paragraphs": [
                f"The {topic} was quiet in the early morning, and nobody had come yet.",
                f"By noon the {topic} was crowded with visitors from the town.",
                f"In the evening the visitors left the {topic} and the light faded.",
                f"At night the {topic} belonged to the owls and the wind again.",
                f"Years later people still told stories about that day at the {topic}."]}) + "\n")
    build(str(root / "corpus.jsonl"), root / "store", quiet=True)
    s = LiveServer(root / "store").start()
    yield s
    s.stop()


def test_dropped_context_paragraphs_are_never_predicted_and_bad_ones_are_refused(general_server):
    with Client(general_server.address, timeout=120) as c:
        assert c.info().max_context == 8
        river = [p.paragraph_id for p in c.get_document("river").paragraphs]
        base = [river[0], river[1]] * 4  # the eight paragraphs the model reads
        top = c.predict_next(base, top_k=3).predictions[0]
        assert top.paragraph_id not in river[:2]
        stored = c.get_paragraphs([top.paragraph_id], include_vectors=True)[0]
        for oldest in (top.paragraph_id, stored.text, stored.vector):  # by id, by text, by its vector
            result = c.predict_next([oldest, *base], top_k=5)
            assert result.context_dropped == 1
            assert top.paragraph_id not in [p.paragraph_id for p in result.predictions], oldest  # it was the first
        refusals = [("  ", InvalidArgument, "INVALID_TEXT", "context[0].text"),  # each was accepted
                    (10**12, NotFound, "UNKNOWN_IDS", "context[0].paragraph_id"),
                    ([0.5] * 7, InvalidArgument, "DIMENSION_MISMATCH", "context[0].vector"),
                    ([float("nan")] * 384, InvalidArgument, "INVALID_VECTOR", "context[0].vector")]
        for bad, error, reason, field in refusals:
            for call in (lambda bad=bad: c.predict_next([bad, *base], top_k=1),
                         lambda bad=bad: c.rerank([bad, *base], [river[2]])):
                with pytest.raises(error) as err:
                    call()
                assert (err.value.reason, err.value.field) == (reason, field), bad
        with pytest.raises(NotFound) as err:  # an unknown id among the dropped ones and the read ones: the first named
            c.predict_next([10**12, *base[:-1], 10**12 + 1], top_k=1)
        assert err.value.field == "context[0].paragraph_id"
