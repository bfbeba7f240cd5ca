"""Where each corpus puts its cosines: consecutive paragraphs, paragraphs 8 apart in one document, random pairs.

    python -m bench.quality.cosine_scales --store peps=DIR --store narrative=DIR --store builtin=DIR

A model trained on some genres reads raw cosines (and TF-IDF cosines) as features; if another genre puts the same
relations at other values, what it learned lands in the wrong place. For each built store: the mean and standard
deviation of the cosine between a paragraph and the next one of its document, one 8 paragraphs later in the same
document (when there is one), and a random other paragraph (20,000 seeded pairs each, every split: this describes
the corpus, it judges nothing). Prints a table, writes bench/results/cosine_scales.{json,md}.
"""

from __future__ import annotations

import sys

import numpy as np

from bench.record import add_stores, argument_parser, save, stamp, stores

PAIRS = 20_000
FAR = 8


def scales(path: str, seed: int = 0) -> dict:
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(path, readonly=True) as store:
        seq = ParagraphSequences(store)
    vectors, doc = seq.vectors, np.asarray(seq.doc_ids)
    rng = np.random.default_rng(seed)
    out = {"paragraphs": len(vectors)}
    for name, gap in (("next", 1), (f"{FAR} later", FAR)):
        starts = np.flatnonzero(doc[:-gap] == doc[gap:])  # ParagraphSequences keeps each document's order
        pick = rng.choice(starts, size=min(PAIRS, len(starts)), replace=False)
        cos = (vectors[pick] * vectors[pick + gap]).sum(1)
        out[name] = {"mean": float(cos.mean()), "sd": float(cos.std()), "pairs": len(pick)}
    a, b = rng.integers(0, len(vectors), PAIRS), rng.integers(0, len(vectors), PAIRS)
    keep = a != b
    cos = (vectors[a[keep]] * vectors[b[keep]]).sum(1)
    out["random"] = {"mean": float(cos.mean()), "sd": float(cos.std()), "pairs": int(keep.sum())}
    return out


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    add_stores(parser)
    args = parser.parse_args()
    pairs = stores(parser, args)
    record = {**stamp(__file__), "corpora": {}}
    lines = [f"# Cosine scales by corpus ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"MiniLM cosine, mean ± standard deviation over up to {PAIRS:,} seeded pairs per column.", "",
             f"| corpus | paragraphs | next | {FAR} later, same document | random pair | next minus random |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, path in pairs:
        s = record["corpora"][name] = scales(path)
        cells = " | ".join(f"{s[k]['mean']:.3f} ± {s[k]['sd']:.3f}" for k in ("next", f"{FAR} later", "random"))
        lines.append(f"| {name} | {s['paragraphs']:,} | {cells} | {s['next']['mean'] - s['random']['mean']:.3f} |")
    print("\n".join(lines))
    save("cosine_scales", record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
