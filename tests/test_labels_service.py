"""Labels and filters over gRPC: a real server on 127.0.0.1 over a real store and model, both clients and the CLI."""

import asyncio
import json

import pytest
from conftest import run_cli
from nextpara.client import AsyncClient, Filter, InvalidArgument

ACME = [  # a tenant's documents, about one thing; the built-in corpus around them is about Python
    ("acme-kettle", ["The kettle whistles when the water boils.", "Pour the water over the tea leaves.",
                     "Let the tea steep for three minutes.", "Remove the leaves before they turn the tea bitter."]),
    ("acme-bread", ["Mix the flour, the water and the yeast.", "Knead the dough until it is smooth.",
                    "Let the dough rise for an hour.", "Bake the loaf until its crust is brown."]),
    ("acme-garden", ["Water the tomatoes in the early morning.", "Pinch out the side shoots as they appear.",
                     "Tie the stems to their canes.", "Pick the fruit when it is fully red."]),
]


@pytest.fixture(scope="module")
def acme(server):
    """The ACME documents, labelled tenant=acme (and one of them also tier=gold), added once per module."""
    from nextpara.client import Client

    with Client(server.address, timeout=60) as c:
        c.add_documents([{"doc_id": d, "paragraphs": ps, "labels": {"tenant": "acme", **({"tier": "gold"} if i == 0 else {})}}
                         for i, (d, ps) in enumerate(ACME)])
        yield {d: [p.paragraph_id for p in c.get_document(d).paragraphs] for d, _ in ACME}


def test_labels_round_trip_and_an_upsert_replaces_them(client, acme):
    doc = client.get_document("acme-kettle")
    assert doc.document.labels == {"tenant": "acme", "tier": "gold"}
    listed = client.list_documents(1000, labels={"tenant": "acme"})
    assert [(d.doc_id, d.labels) for d in listed.documents] == [
        ("acme-bread", {"tenant": "acme"}), ("acme-garden", {"tenant": "acme"}),
        ("acme-kettle", {"tenant": "acme", "tier": "gold"})]
    assert [d.doc_id for d in client.list_documents(labels={"tenant": "acme", "tier": "gold"}).documents] == ["acme-kettle"]
    texts = ["A note that moves between tenants.", "Its second paragraph."]
    client.add_documents([{"doc_id": "moving-note", "paragraphs": texts, "labels": {"tenant": "initech"}}])
    ids = [p.paragraph_id for p in client.get_document("moving-note").paragraphs]
    moved = client.add_documents([{"doc_id": "moving-note", "paragraphs": texts, "labels": {"tenant": "globex"}}])
    assert (moved.documents_replaced, moved.paragraphs_written) == (1, 0)
    doc = client.get_document("moving-note")
    assert doc.document.labels == {"tenant": "globex"} and doc.document.generation == moved.index_version
    assert [p.paragraph_id for p in doc.paragraphs] == ids  # only the labels changed
    assert client.list_documents(labels={"tenant": "initech"}).documents == []
    client.add_documents([{"doc_id": "moving-note", "paragraphs": texts[:1]}])  # re-added without labels: none
    assert client.get_document("moving-note").document.labels == {}
    client.delete_documents(["moving-note"])


def test_listing_by_label_pages_with_its_own_tokens(client):
    client.add_documents([{"doc_id": f"paged-{i}", "paragraphs": [f"Paged document number {i}."],
                           "labels": {"batch": "paged"} if i % 2 else {}} for i in range(14)])
    try:
        seen, token = [], ""
        while True:
            page = client.list_documents(3, token, labels={"batch": "paged"})
            seen += [d.doc_id for d in page.documents]
            if not page.next_page_token:
                break
            token = page.next_page_token
        assert seen == sorted(f"paged-{i}" for i in range(1, 14, 2))
        first = client.list_documents(3, labels={"batch": "paged"})
        for labels in ({}, {"batch": "other"}):
            with pytest.raises(InvalidArgument) as err:
                client.list_documents(3, first.next_page_token, labels=labels)
            assert (err.value.reason, err.value.field) == ("INVALID_PAGE_TOKEN", "page_token")
        with pytest.raises(InvalidArgument) as err:  # and an unfiltered listing's token is not a filtered one's
            client.list_documents(3, client.list_documents(3).next_page_token, labels={"batch": "paged"})
        assert err.value.reason == "INVALID_PAGE_TOKEN"
    finally:
        client.delete_documents([f"paged-{i}" for i in range(14)])


def test_predict_next_searches_only_what_the_filter_allows(client, acme):
    context = ["The json module encodes Python objects as JSON text."]  # unfiltered, nothing of ACME ranks high:
    everything = client.predict_next(context, top_k=10)  # cutting that list down to the tenant would leave it empty
    assert len([p for p in everything.predictions if p.doc_id in acme]) < 10
    tenant = client.predict_next(context, top_k=10, filter=Filter(labels={"tenant": "acme"}))
    assert len(tenant.predictions) == 10 and {p.doc_id for p in tenant.predictions} <= set(acme)
    scores = [p.score for p in tenant.predictions]
    assert scores == sorted(scores, reverse=True)
    # every paragraph the filter allows, and nothing else, when top_k exceeds them (the context is none of them)
    two = client.predict_next(context, top_k=50, filter={"doc_ids": ["acme-bread", "acme-garden", "no-such-doc"]})
    assert sorted(p.paragraph_id for p in two.predictions) == sorted(acme["acme-bread"] + acme["acme-garden"])
    denied = client.predict_next(context, top_k=50, exclude_doc_ids=["acme-bread"],
                                 filter=Filter(labels={"tenant": "acme"}, exclude_doc_ids=["acme-garden"]))
    assert sorted(p.paragraph_id for p in denied.predictions) == sorted(acme["acme-kettle"])
    gold = client.predict_next([acme["acme-kettle"][0]], top_k=50, filter=Filter(labels={"tier": "gold"}))
    assert sorted(p.paragraph_id for p in gold.predictions) == sorted(acme["acme-kettle"][1:])  # the context excluded
    one_each = client.predict_next(context, top_k=10, filter=Filter(labels={"tenant": "acme"}, max_per_document=1))
    assert sorted(p.doc_id for p in one_each.predictions) == sorted(acme)
    assert one_each.predictions[0] == tenant.predictions[0]
    best = {}
    for p in tenant.predictions + two.predictions:  # each document's best, as the unlimited rankings have it
        best.setdefault(p.doc_id, p.paragraph_id)
    assert {p.doc_id: p.paragraph_id for p in one_each.predictions} == best
    floor = scores[4]
    above = client.predict_next(context, top_k=10, filter=Filter(labels={"tenant": "acme"}, min_score=floor))
    assert [p.paragraph_id for p in above.predictions] == [p.paragraph_id for p in tenant.predictions if p.score >= floor]
    nobody = client.predict_next(context, top_k=5, include_attention=True, filter=Filter(labels={"tenant": "nobody"}))
    assert nobody.predictions == [] and nobody.attention == []


def test_the_async_client_takes_filters_and_labels(server, acme):
    async def main():
        async with AsyncClient(server.address, timeout=60) as c:
            r = await c.predict_next(["Knead the dough."], top_k=3, filter=Filter(doc_ids=["acme-bread"]))
            page = await c.list_documents(labels={"tier": "gold"})
            return r, page

    r, page = asyncio.run(main())
    assert len(r.predictions) == 3 and {p.doc_id for p in r.predictions} == {"acme-bread"}
    assert [(d.doc_id, d.labels["tier"]) for d in page.documents] == [("acme-kettle", "gold")]


@pytest.mark.parametrize("call, field, reason", [
    (lambda c: c.add_documents([{"doc_id": "ok", "paragraphs": ["Fine."]},
                                {"doc_id": "bad", "paragraphs": ["Fine too."], "labels": {"tenant": ""}}]),
     'documents[1].labels["tenant"]', "FIELD_REQUIRED"),
    (lambda c: c.add_documents([{"doc_id": "bad", "paragraphs": ["Fine."], "labels": {"k" * 129: "v"}}]),
     'documents[0].labels["' + "k" * 129 + '"]', "OUT_OF_RANGE"),
    (lambda c: c.add_documents([{"doc_id": "bad", "paragraphs": ["Fine."], "labels": {"tenant": "a\x00"}}]),
     'documents[0].labels["tenant"]', "INVALID_TEXT"),
    (lambda c: c.predict_next(["A context."], filter=Filter(labels={"tenant": " "})), 'filter.labels["tenant"]',
     "FIELD_REQUIRED"),
    (lambda c: c.predict_next(["A context."], filter=Filter(doc_ids=["acme-bread", ""])), "filter.doc_ids[1]",
     "FIELD_REQUIRED"),
    (lambda c: c.predict_next(["A context."], filter=Filter(exclude_doc_ids=["x" * 600])), "filter.exclude_doc_ids[0]",
     "OUT_OF_RANGE"),
    (lambda c: c.predict_next(["A context."], exclude_doc_ids=[f"d{i}" for i in range(10_001)]), "exclude_doc_ids",
     "OUT_OF_RANGE"),  # the top-level deny-list is capped as the filter's is
    (lambda c: c.predict_next(["A context."], exclude_doc_ids=["acme-bread", " "]), "exclude_doc_ids[1]",
     "FIELD_REQUIRED"),
    (lambda c: c.list_documents(labels={"": "acme"}), 'labels[""]', "FIELD_REQUIRED"),
])
def test_bad_labels_and_filters_name_the_field(client, call, field, reason):
    before = client.info()
    with pytest.raises(InvalidArgument) as err:
        call(client)
    assert (err.value.reason, err.value.field) == (reason, field)
    assert client.info().index_version == before.index_version  # refused whole: nothing stored


def test_distinct_texts_keeps_each_text_once_and_still_fills_top_k(client, server, tmp_path):
    """Boilerplate repeated in every document (a licence notice, a sign-off) comes back once with distinct_texts."""
    notice = "This recipe card is licensed for home use only; copying it for sale is not permitted."
    docs = [{"doc_id": f"card-{i}", "paragraphs": [f"Recipe card {i}: {dish}.", notice], "labels": {"kind": "card"}}
            for i, dish in enumerate(["lentil soup", "onion tart", "plum cake", "pea risotto", "fig jam", "rye bread"])]
    client.add_documents(docs)
    try:
        context = ["Recipe card 9: barley stew."]
        only_cards = Filter(labels={"kind": "card"})
        plain = client.predict_next(context, top_k=8, filter=only_cards)
        texts = [p.text for p in plain.predictions]
        assert texts.count(notice) > 1  # the corpus does what it says: the notice repeats in the answer
        distinct = client.predict_next(context, top_k=8, filter={**vars(only_cards), "distinct_texts": True})
        kept = [p.text for p in distinct.predictions]
        assert len(kept) == len(set(kept)) == 7 and notice in kept  # 6 cards' first paragraphs and the notice once
        first = next(p for p in plain.predictions if p.text == notice)  # the notice's best-ranked paragraph stays
        assert next(p for p in distinct.predictions if p.text == notice).paragraph_id == first.paragraph_id
        r = run_cli("predict", *context, "--label", "kind=card", "--distinct-texts", "-k", "8", "--json",
                    env={"NEXTPARA_ADDRESS": server.address})
        assert r.returncode == 0, r.stderr
        assert [p["text"] for p in json.loads(r.stdout)["predictions"]] == kept
        with pytest.raises(TypeError, match="filter.distinct_texts must be True or False, got 1"):
            client.predict_next(context, filter=Filter(distinct_texts=1))
    finally:
        client.delete_documents([d["doc_id"] for d in docs])


def test_the_cli_adds_labels_and_predicts_with_a_filter(server, acme, tmp_path):
    path = tmp_path / "labelled.jsonl"
    path.write_text(json.dumps({"doc_id": "cli-labelled", "paragraphs": ["Sweep the floor.", "Mop it after."],
                                "labels": {"tenant": "cli"}}) + "\n")
    env = {"NEXTPARA_ADDRESS": server.address}
    r = run_cli("add", str(path), env=env)
    assert r.returncode == 0, r.stderr
    r = run_cli("predict", "Clean the kitchen.", "--label", "tenant=cli", "-k", "5", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert {p["doc_id"] for p in json.loads(r.stdout)["predictions"]} == {"cli-labelled"}
    r = run_cli("predict", "Boil the water.", "--label", "tenant=acme", "--exclude-doc", "acme-kettle", "--only-doc",
                "acme-bread", "--only-doc", "acme-kettle", "--max-per-document", "2", "--min-score", "-100", "--json",
                env=env)
    assert r.returncode == 0, r.stderr
    assert [p["doc_id"] for p in json.loads(r.stdout)["predictions"]] == ["acme-bread"] * 2
    r = run_cli("predict", "Clean the kitchen.", "--label", "tenant=nosuch", env=env)  # printed a blank line, said nothing
    assert r.returncode == 0 and r.stdout == "", r.stdout
    assert "nextpara predict: no stored paragraph matched the filter (--label tenant=nosuch)" in r.stderr, r.stderr
    r = run_cli("predict", "Clean the kitchen.", "--label", "tenant=nosuch", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["predictions"] == [] and r.stderr == "", r.stderr
    r = run_cli("predict", "Boil the water.", "--label", "tenant", env=env)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = run_cli("predict", "Clean the kitchen.", "--label", "tenant=cli", "--label", "tenant=acme", env=env)
    assert r.returncode == 2 and ("--label tenant=cli and --label tenant=acme: a document carries one value of "
                                  "'tenant', so both cannot match") in r.stderr, r.stderr  # the first was dropped
    r = run_cli("predict", "Clean the kitchen.", "--max-per-document", "-1", env=env)  # protobuf's ValueError traceback
    assert r.returncode == 2 and "--max-per-document must be 0 (no limit) or more, got -1" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    path.write_text(json.dumps({"doc_id": "cli-bad", "paragraphs": ["A."], "labels": {"tenant": 1}}) + "\n")
    r = run_cli("add", str(path), env=env)
    assert r.returncode == 2 and "labelled.jsonl:1" in r.stderr and "labels" in r.stderr
    r = run_cli("delete", "cli-labelled", env=env)
    assert r.returncode == 0, r.stderr
