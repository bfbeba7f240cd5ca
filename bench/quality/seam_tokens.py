"""Probe: can a cheap learned reader of the tokens where two paragraphs meet tell the *next* paragraph?

    python -m bench.quality.seam_tokens --data-dir DIR [--train-queries 12000] [--queries 2000] [--output NAME]

The TF-IDF seam cosines of seam_probe.py measure *overlap* at the seam, and did not move validation. This
probe learns *patterns* instead: which endings go with which openings (a colon and a list or code, a
question and its answer, a quotation and a reply, "however" after a claim), from the tokens themselves
(lower-cased words and single punctuation marks, hashed into buckets; the last/first 3 also by their place).
Everything comes from content (docs/evaluation.md); a candidate's document is read only for direction accuracy.

On the store's served model's own stage-1 lists (L = 4) it fits, on *training* queries' lists:

    score = model score + <U(end tokens of the last context paragraph), V(start tokens of the candidate)> + p(start)

U, V: bucket embeddings of width ``--rank`` averaged over a window of ``--tokens`` tokens; p: a learned prior of
an opening (some openings only ever continue). Listwise softmax over lists that hold the target. Then it
reports, on validation queries (the test split is not touched), Recall@1, MRR@10 and direction accuracy (among
queries whose list holds the target: the target above every other candidate of its own document), for the
model alone, with the opening prior alone and with the whole seam term, after each epoch (a fixed number,
chosen before the run; nothing is picked on validation).
"""

from __future__ import annotations

import os
import re
import sys
import time
import zlib

import numpy as np

from bench import record
from bench.quality.lists import scored_lists

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOKEN = re.compile(r"\w+|[^\w\s]")
BUCKETS = 1 << 18
PLACED = 3  # the last (first) tokens also hashed with their place


def bucket(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % (BUCKETS - 1) + 1  # 0 is padding


def window(text: str, n: int, end: bool) -> list[int]:
    tokens = TOKEN.findall(text.lower())
    tokens = tokens[-n:][::-1] if end else tokens[:n]  # nearest the seam first
    return [bucket(t) for t in tokens] + [bucket(f"{k}|{t}") for k, t in enumerate(tokens[:PLACED])]


def token_matrix(texts: list[str], n: int, end: bool) -> np.ndarray:
    rows = [window(t, n, end) for t in texts]
    out = np.zeros((len(rows), n + PLACED), np.int64)
    for r, row in enumerate(rows):
        out[r, :len(row)] = row
    return out


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--train-queries", type=int, default=12000, help="training queries whose lists fit the reader")
    parser.add_argument("--tokens", type=int, default=12, help="tokens read on each side of the seam")
    parser.add_argument("--rank", type=int, default=16, help="width of the bucket embeddings")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--output", default="seam_tokens", help="results name under bench/results/")
    args = parser.parse_args()

    import torch
    from nextpara.attention_core.general import served_model
    from nextpara.attention_core.metrics import hit_rank, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    torch.manual_seed(0)
    t0 = time.perf_counter()
    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    docs = np.asarray(seq.doc_ids)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    model, meta = served_model(store)
    pipeline = RerankPipeline(model, store, 100)
    starts = torch.from_numpy(token_matrix(texts, args.tokens, end=False))
    ends = torch.from_numpy(token_matrix(texts, args.tokens, end=True))
    print(f"loaded {len(seq)} paragraphs and their seam tokens, {time.perf_counter() - t0:.0f}s", flush=True)

    def mine(split: str, n: int, seed: int):
        """Stage-1 lists (rows) of a split's queries, as serving makes them, with the model's scores."""
        qs = seq.queries(split, 4, limit=n, seed=seed)
        lists, base = scored_lists(pipeline, seq, texts, qs)
        target = np.array([seq.text_class[q.target] for q in qs])
        positive = [seq.text_class[l] == c for l, c in zip(lists, target)]
        print(f"mined {len(qs)} {split} lists, {time.perf_counter() - t0:.0f}s", flush=True)
        return qs, lists, base, target, positive

    train = mine("train", args.train_queries, 0)
    val = mine("validation", args.queries, 1)

    class Seam(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.u = torch.nn.Embedding(BUCKETS, args.rank, padding_idx=0)
            self.v = torch.nn.Embedding(BUCKETS, args.rank, padding_idx=0)
            self.p = torch.nn.Embedding(BUCKETS, 1, padding_idx=0)
            for e in (self.u, self.v):
                torch.nn.init.normal_(e.weight, std=0.1)
            torch.nn.init.zeros_(self.p.weight)

        @staticmethod
        def mean(table, tokens):  # (..., T) -> (..., width), padding left out
            real = (tokens > 0).float()
            return (table(tokens) * real[..., None]).sum(-2) / real.sum(-1, keepdim=True).clamp(min=1)

        def forward(self, last_rows, cand_rows, pair: bool = True):  # (B,), (B, K) -> (B, K)
            opening = self.mean(self.p, starts[cand_rows]).squeeze(-1)
            if not pair:
                return opening
            u = self.mean(self.u, ends[last_rows])  # (B, r)
            v = self.mean(self.v, starts[cand_rows])  # (B, K, r)
            return opening + (v * u[:, None]).sum(-1)

    def batch(data, picks):
        qs, lists, base, _, positive = data
        K = max(len(lists[i]) for i in picks)
        rows = torch.zeros(len(picks), K, dtype=torch.long)
        b = torch.full((len(picks), K), float("-inf"))
        pos = torch.zeros(len(picks), K, dtype=torch.bool)
        for n, i in enumerate(picks):
            k = len(lists[i])
            rows[n, :k], b[n, :k] = torch.from_numpy(lists[i]), torch.from_numpy(base[i])
            pos[n, :k] = torch.from_numpy(positive[i])
        last = torch.tensor([int(qs[i].context[-1]) for i in picks])
        return last, rows, b, pos

    def evaluate(net, pair):
        qs, lists, base, target, positive = val
        ranks, direction = [], []
        with torch.no_grad():
            for s in range(0, len(qs), 256):
                picks = list(range(s, min(s + 256, len(qs))))
                last, rows, b, _ = batch(val, picks)
                scores = b if net is None else b + net(last, rows, pair)
                for n, i in enumerate(picks):
                    order = lists[i][np.argsort(-scores[n, :len(lists[i])].numpy(), kind="stable")]
                    ranks.append(hit_rank(seq.text_class[order[:10]], target[i]))
                    if positive[i].any():
                        same = (docs[order] == docs[qs[i].target]) | (seq.text_class[order] == target[i])
                        direction.append(seq.text_class[order[same][0]] == target[i])
        out = summarize(np.array(ranks), n_boot=500)
        out["direction"] = float(np.mean(direction))
        return out

    def train_reader(pair: bool):
        net = Seam()
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        usable = np.array([i for i, p in enumerate(train[4]) if p.any()])
        rng = np.random.default_rng(0)
        history = []
        for epoch in range(args.epochs):
            order = usable[rng.permutation(len(usable))]
            losses = []
            for s in range(0, len(order), 64):
                last, rows, b, pos = batch(train, order[s:s + 64].tolist())
                logits = b + net(last, rows, pair)
                loss = (torch.logsumexp(logits, -1) - torch.logsumexp(logits.masked_fill(~pos, float("-inf")), -1)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss))
            m = evaluate(net, pair)
            history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)), **m})
            print(f"{'pair' if pair else 'opening'} epoch {epoch + 1}: loss {np.mean(losses):.4f} R@1 "
                  f"{m['recall@1']:.4f} MRR@10 {m['mrr@10']:.4f} direction {m['direction']:.3f}, "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
        return history

    alone = evaluate(None, False)
    print(f"model alone: R@1 {alone['recall@1']:.4f} MRR@10 {alone['mrr@10']:.4f} direction {alone['direction']:.3f}")
    variants = {"model + opening prior": train_reader(False), "model + opening prior + seam pairs": train_reader(True)}

    stamp = record.stamp(__file__)
    about = f"model {meta['model_version']} ({meta.get('source', 'trained')})"
    stage1 = float(np.mean([p.any() for p in val[4]]))
    lines = [f"# Seam tokens: a learned reader of endings and openings ({stamp['date']})", "",
             f"Command: `{stamp['command']}`", "",
             f"Served {about}; reader fitted on {len(train[0])} training queries' lists, measured on {len(val[0])} "
             f"validation queries (L = 4, stage-1 recall {stage1:.3f}); {args.tokens} tokens each side, rank "
             f"{args.rank}, {args.epochs} epochs (fixed before the run).", "",
             "| features | epoch | R@1 | MRR@10 | direction accuracy |", "| --- | --- | --- | --- | --- |",
             f"| model | - | {alone['recall@1']:.4f} [{alone['recall@1_ci'][0]:.3f}, {alone['recall@1_ci'][1]:.3f}] | "
             f"{alone['mrr@10']:.4f} | {alone['direction']:.3f} |"]
    for name, history in variants.items():
        for h in history:
            lines.append(f"| {name} | {h['epoch']} | {h['recall@1']:.4f} [{h['recall@1_ci'][0]:.3f}, "
                         f"{h['recall@1_ci'][1]:.3f}] | {h['mrr@10']:.4f} | {h['direction']:.3f} |")
    record.save(args.output, {**stamp, "model": about, "model_alone": alone, "variants": variants,
                              "train_queries": len(train[0]), "queries": len(val[0]), "stage1_recall": stage1,
                              "tokens": args.tokens, "rank": args.rank, "epochs": args.epochs},
                "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
