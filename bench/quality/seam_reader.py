"""Experiment: can a small cross-encoder that reads the tokens where two paragraphs meet tell the next paragraph
from its neighbours in the same document (the direction the vector model misses)?

    python -m bench.quality.seam_reader --data-dir /tmp/peps-bench [--layers 3] [--tokens 32] [--minutes 12]

The reader is the bundled MiniLM's first ``--layers`` transformer layers (initialised from it) and a linear
head on [CLS], over "[CLS] last tokens of paragraph A [SEP] first tokens of paragraph B [SEP]" (``--tokens``
each side). It is trained listwise on groups drawn from training documents: for the anchor A (a paragraph)
the group is its true successor, one far paragraph of the same document (the easy negative: at least 4
away), the successor's successor and the paragraph three before A (the hard ones: the neighbours a
vector model confuses with the next). It reports, on groups from validation documents, before and after
training: easy accuracy (successor scored above the far paragraph; chance 0.5), direction accuracy
(successor above its two hard neighbours; chance 0.33) and group accuracy (first of all four; chance 0.25). The test split is not touched. Writes
bench/results/NAME.{md,json} (default seam_reader_<corpus>).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def groups(seq, split: str, rng: np.random.Generator, limit: int) -> np.ndarray:
    """(n, 5) rows: anchor, successor, far (easy), successor's successor, three before the anchor (hard)."""
    out = []
    for doc, rows in seq.doc_rows.items():
        if seq.split[doc] != split or len(rows) < 8:
            continue
        for a in range(3, len(rows) - 2):
            far = [i for i in range(len(rows)) if abs(i - (a + 1)) >= 4 and i != a]
            out.append([rows[a], rows[a + 1], rows[rng.choice(far)], rows[a + 2], rows[a - 3]])
    out = np.asarray(out, np.int64)
    return out[rng.permutation(len(out))[:limit]]


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store (read only)")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32, help="tokens from each side of the seam")
    parser.add_argument("--minutes", type=float, default=12.0, help="training time budget")
    parser.add_argument("--batch", type=int, default=16, help="groups per step")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--val-groups", type=int, default=1000)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()

    import torch
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.embedders import bundled_minilm_path
    from nextpara.store.store import open_store
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    st = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    tok = st.tokenizer
    bert = st[0].auto_model
    bert.encoder.layer = bert.encoder.layer[:args.layers]
    ids = tok(texts, add_special_tokens=False, truncation=False)["input_ids"]
    heads = [i[:args.tokens] for i in ids]
    tails = [i[-args.tokens:] for i in ids]
    train_groups = groups(seq, "train", rng, 10**9)
    val_groups = groups(seq, "validation", rng, args.val_groups)
    print(f"{len(seq)} paragraphs tokenised, {len(train_groups)} training and {len(val_groups)} validation groups, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)

    head = torch.nn.Linear(bert.config.hidden_size, 1)
    cls, sep = tok.cls_token_id, tok.sep_token_id

    def score(pairs: list[tuple[int, int]]) -> torch.Tensor:
        seqs = [[cls] + tails[a] + [sep] + heads[b] + [sep] for a, b in pairs]
        types = [[0] * (len(tails[a]) + 2) + [1] * (len(heads[b]) + 1) for a, b in pairs]
        n = max(map(len, seqs))
        x = torch.tensor([s + [0] * (n - len(s)) for s in seqs])
        t = torch.tensor([s + [0] * (n - len(s)) for s in types])
        m = torch.tensor([[1] * len(s) + [0] * (n - len(s)) for s in seqs])
        out = bert(input_ids=x, attention_mask=m, token_type_ids=t).last_hidden_state[:, 0]
        return head(out).squeeze(-1)

    @torch.no_grad()
    def evaluate() -> dict:
        bert.eval()
        s = torch.cat([score([(g[0], r) for g in val_groups[i:i + 64] for r in g[1:]]).view(-1, 4)
                       for i in range(0, len(val_groups), 64)])
        return {"easy_accuracy": float((s[:, 0] > s[:, 1]).float().mean()),
                "direction_accuracy": float((s[:, [0, 2, 3]].argmax(1) == 0).float().mean()),
                "group_accuracy": float((s.argmax(1) == 0).float().mean())}

    before = evaluate()
    print(f"before training: {before}", flush=True)
    opt = torch.optim.AdamW([{"params": bert.parameters(), "lr": args.lr}, {"params": head.parameters(), "lr": 1e-3}])
    steps, seen, history = 0, 0, []
    started = time.perf_counter()
    losses = []
    while time.perf_counter() - started < args.minutes * 60 and seen < len(train_groups):
        bert.train()
        batch = train_groups[seen:seen + args.batch]
        s = score([(g[0], r) for g in batch for r in g[1:]]).view(-1, 4)
        loss = torch.nn.functional.cross_entropy(s, torch.zeros(len(batch), dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        steps, seen = steps + 1, seen + len(batch)
        if steps % 200 == 0:
            m = evaluate()
            history.append({"groups_seen": seen, "loss": float(np.mean(losses[-200:])), **m})
            print(f"{seen} groups, {time.perf_counter() - started:.0f}s: loss {np.mean(losses[-200:]):.3f} {m}", flush=True)
    after = evaluate()
    seconds = time.perf_counter() - started
    t1 = time.perf_counter()
    with torch.no_grad():
        bert.eval()
        score([(int(val_groups[0][0]), int(r)) for r in val_groups[:20, 1]])
    infer_ms = (time.perf_counter() - t1) * 1000
    name = args.output or f"seam_reader_{store.data_dir.path.name}"
    stamp = record.stamp(__file__)
    rec = {**stamp, "layers": args.layers, "tokens": args.tokens, "lr": args.lr, "batch": args.batch,
           "groups_seen": seen, "training_groups": len(train_groups), "seconds": round(seconds), "before": before,
           "after": after, "history": history, "ms_per_20_candidates": round(infer_ms, 1)}
    lines = [f"# Seam reader on {store.data_dir.path.name} ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"MiniLM's first {args.layers} layers over {args.tokens} + {args.tokens} tokens; trained {round(seconds)} s on "
             f"{seen} of {len(train_groups)} training groups; {len(val_groups)} validation groups. Scoring 20 "
             f"candidates for one anchor: {infer_ms:.0f} ms.", "",
             "| | easy (next vs far, chance 0.5) | direction (next vs its neighbours, chance 0.33) | group of 4 (chance 0.25) |",
             "| --- | --- | --- | --- |"]
    for label, m in (("before training", before), ("after", after)):
        lines.append(f"| {label} | {m['easy_accuracy']:.3f} | {m['direction_accuracy']:.3f} | {m['group_accuracy']:.3f} |")
    record.save(name, rec, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
