"""The word weights (IDF) a general model fits on the store it serves, at every load: what that costs.

    python -m bench.speed.idf_fit --data-dir DIR [--repeat 3] [--output idf_fit]

A store without a model of its own is served by the general model, whose IDF comes from the store's own texts
(attention_core/general.py, fit_store_lexicon): every `nextpara serve`, `eval` and batch job reads all of them and
counts in how many each word bucket occurs before its first answer. Timed in one run, each the median of
``--repeat``:

* reading the texts (``store.get_paragraphs`` of every stored id), the same for both counts;
* the count by its definition, the reference: each text's ``lexical.token_counts`` (every token hashed, then
  ``np.unique``), its buckets counted once;
* ``lexical.document_frequencies``, what the fit uses: each distinct word hashed once for all texts, a set of buckets
  per text. Both counts must be equal, bucket for bucket, or the script fails.

Prints a table, writes bench/results/NAME.{json,md}.
"""

from __future__ import annotations

import time

import numpy as np

from bench.record import argument_parser, save, stamp


def median_seconds(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store (read only)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", default="idf_fit")
    args = parser.parse_args()
    from nextpara.attention_core import lexical
    from nextpara.store.store import open_store

    with open_store(args.data_dir, readonly=True) as store:
        ids = [int(i) for i in store.paragraph_table()[0]]
        read_s, texts = median_seconds(lambda: [p.text for p in store.get_paragraphs(ids)], args.repeat)

    def by_definition() -> np.ndarray:
        df = np.zeros(lexical.N_BUCKETS, np.int64)
        for text in texts:
            df[lexical.token_counts(text)[0]] += 1
        return df

    reference_s, reference = median_seconds(by_definition, args.repeat)
    fast_s, fast = median_seconds(lambda: lexical.document_frequencies(texts), args.repeat)
    if not np.array_equal(reference, fast):
        raise SystemExit(f"the two counts differ in {int((reference != fast).sum())} buckets")
    record = {**stamp(__file__), "paragraphs": len(texts), "repeat": args.repeat,
              "seconds": {"read_texts": round(read_s, 3), "count_by_definition": round(reference_s, 3),
                          "document_frequencies": round(fast_s, 3)},
              "ratio_to_reference": round(fast_s / reference_s, 3)}
    md = (f"# The general model's IDF fit on a store ({record['date']})\n\nCommand: `{record['command']}`\n\n"
          f"Machine: {record['machine']}{', ' + record['cpu'] if 'cpu' in record else ''}. {len(texts):,} paragraphs; "
          f"median of {args.repeat} runs each; the two counts equal in every bucket.\n\n"
          "| step | seconds | / the count by its definition |\n| --- | --- | --- |\n"
          f"| read every stored text | {read_s:.3f} | |\n"
          f"| count by its definition (token_counts per text; the reference) | {reference_s:.3f} | 1.00x |\n"
          f"| `lexical.document_frequencies` (each distinct word hashed once) | {fast_s:.3f} | "
          f"{fast_s / reference_s:.2f}x |\n")
    save(args.output, record, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
