"""What the guard after ``nextpara build`` decides on each store, and what it costs beside the build's embedding.

    python -m bench.quality.build_guard --store peps=DIR --store narrative=DIR --store builtin=DIR [--output NAME]
    python -m bench.quality.build_guard --write-walk FILE   # a corpus where plain cosine wins, to build and judge

Each store is judged as ``nextpara build`` judges a store with no model of its own (attention_core/build_guard.py):
the general model and B1 (cosine to the last paragraph) on its validation split, and plain cosine serves where B1
scores clearly above the general model. It is judged even if unchanged since a guard last judged it (where a build's
plain cosine serves already, as a build judges it: it stays until the general model scores as well), and in place:
the store gets the build's ``train_report.json`` (and the cosine checkpoint, where cosine wins), as ``nextpara
build`` would leave it. A store with a model of its own is reported as not judged.

The cost is the guard's seconds, from opening the store to the verdict (the general model loaded and its word weights
fitted on the store included; the interpreter's start and imports, which the build has paid already, not), beside a
reference measured in the same run: MiniLM embedding 512 of the store's paragraphs (seeded sample), scaled to the
store's count, which is what its build spent embedding when nothing came from the embedding cache. Prints a table,
writes bench/results/NAME.{json,md} (default build_guard).
"""

from __future__ import annotations

import sys
import time

from bench.record import add_stores, argument_parser, save, stamp, stores

SAMPLE = 512
WORDS = ("river stone lantern copper meadow violet harbor thunder orchard velvet glacier ember falcon marble willow "
         "canyon saffron beacon quartz tundra juniper cobalt prairie sparrow obsidian lagoon cedar amber").split()


def walking_docs(n_docs: int = 200, n_par: int = 10, n_words: int = 12, seed: int = 0):
    """Documents ({"doc_id", "paragraphs"}) whose every paragraph is the one before with one word swapped."""
    import random

    rng = random.Random(seed)
    for d in range(n_docs):
        words, paragraphs = rng.sample(WORDS, n_words), []
        for _ in range(n_par):
            paragraphs.append(" ".join(words) + ".")
            words = list(words)
            words[rng.randrange(n_words)] = rng.choice(WORDS)
        yield {"doc_id": f"walk-{d}", "paragraphs": paragraphs}


def plural_walks(split: str = "held out", n_docs: int = 200, seed: int = 0) -> list[dict]:
    """A corpus where cosine is clearly better than the general model: walking_docs with every other paragraph's words
    in the plural, of one side of the split rule ("train", or "held out": validation and test). Cosine to the last
    paragraph ranks the next one in its top 10 for about half the queries (the one after it, in the same forms, is
    often nearer: MRR@10 0.10); the general model, whose word features see no word the next paragraph shares with the
    last, and whose transition memory a store of held-out documents does not have, for none (MRR@10 0). (Plain walks were such a corpus until the general
    model trained with the memory, 1b40d518e9b2, which ranks them as well as cosine.)"""
    from nextpara.attention_core.sequences import split_of

    def plural(paragraph: str) -> str:
        return " ".join(w + "s" for w in paragraph.rstrip(".").split()) + "."

    return [{**d, "paragraphs": [plural(p) if i % 2 else p for i, p in enumerate(d["paragraphs"])]}
            for d in walking_docs(n_docs, seed=seed) if (split_of(d["doc_id"]) == "train") == (split == "train")]


def embed_seconds(path: str, n: int = SAMPLE, seed: int = 0) -> tuple[float, int]:
    """(seconds MiniLM would take to embed every paragraph of the store, from a timed sample; paragraphs)."""
    import numpy as np
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(path, readonly=True) as store:
        ids = ParagraphSequences(store).ids
        pick = sorted(int(i) for i in np.random.default_rng(seed).choice(ids, size=min(n, len(ids)), replace=False))
        texts = [p.text for p in store.get_paragraphs(pick)]
        embedder = store.query_embedder()
    count = len(ids)
    embedder.embed(texts[:16])  # the model loaded and warm
    t0 = time.perf_counter()
    embedder.embed(texts)
    return (time.perf_counter() - t0) * count / len(texts), count


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__, __file__)
    add_stores(parser)
    parser.add_argument("--output", default="build_guard", help="results name (default build_guard)")
    parser.add_argument("--write-walk", default=None, metavar="FILE", help="write the plural walks there and stop (a "
                                                                           "corpus where plain cosine wins)")
    args = parser.parse_args(argv)
    if args.write_walk:
        import json

        with open(args.write_walk, "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in plural_walks())
        print(f"wrote {args.write_walk}")
        return 0
    if not args.store:
        parser.error("give --store NAME=DIR (or --write-walk FILE)")
    pairs = stores(parser, args)
    from nextpara.attention_core.build_guard import guard_general
    from nextpara.attention_core.served import fmt, read_report

    rows = []
    for name, path in pairs:
        t0 = time.perf_counter()
        outcome = guard_general(path, again=True)
        seconds = time.perf_counter() - t0
        reference, paragraphs = embed_seconds(path)
        report = read_report(path) if outcome.judged else None
        rows.append({"corpus": name, "data_dir": path, "paragraphs": paragraphs, "judged": outcome.judged,
                     "cosine_serves": outcome.cosine, "line": outcome.line, "guard_seconds": round(seconds, 2),
                     "embed_seconds_reference": round(reference, 1), "ratio": round(seconds / reference, 4),
                     **({"figures": report["figures"]} if report else {})})
        print(f"{name}: {outcome.line} ({seconds:.1f} s)", file=sys.stderr)
    record = stamp(__file__)
    lines = [f"# The guard after `nextpara build` ({record['date']})", "",
             f"Command: `{record['command']}`. Reference: MiniLM embedding {SAMPLE} of each store's "
             "paragraphs in the same run, scaled to its count (a build's embedding time without the cache).", "",
             "| corpus | paragraphs | validation queries | general model MRR@10 | B1 MRR@10 | what serves | guard s | "
             "embedding s (reference) | guard / embedding |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        f = r.get("figures")
        serves = "plain cosine" if r["cosine_serves"] else "general model" if r["judged"] else "not judged"
        lines.append(f"| {r['corpus']} | {r['paragraphs']:,} | {f['B1']['queries'] if f else '-'} | "
                     f"{fmt(f['replaced']) if f else '-'} | {fmt(f['B1']) if f else '-'} | {serves} | "
                     f"{r['guard_seconds']:.1f} | {r['embed_seconds_reference']:.0f} | {r['ratio']:.1%} |")
    lines += ["", *(f"- {r['corpus']}: {r['line']}" for r in rows), "",
              "The stores were built with `nextpara build --corpus ... --no-guard`; the synthetic corpus on which "
              "plain cosine wins is `--write-walk FILE`'s (each paragraph the one before with one word swapped, every "
              "other one's words in the plural, no document of the training split).", ""]
    save(args.output, {**record, "rows": rows}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
