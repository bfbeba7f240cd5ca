"""A query head that proposes several query vectors, against the one query vector the model has: stage-1 recall.

    python -m bench.quality.multi_query --data-dir /tmp/peps-bench [--heads 1 4] [--epochs 6] [--queries 2000]

Stage 1 is the ceiling of every reranker, and what it finds at 200 candidates comes mostly from the model's query
head (bench/quality/README.md, Stage-1 recall). One query vector has to sit between the ways a text can go on (the
topic continued, an example, a change of subject); a head with M outputs can put one vector on each. Here each of M
query vectors is the head's vector (cosine to the last and mean context paragraph plus a learned correction from the
encoded context, as NextParagraphModel.encode) with its own correction, and a paragraph's score is the log of the
summed exp(cos / T) over the M vectors (a mixture: the full softmax over every stored paragraph of training, as
phase 1 of training.py). Searching, the candidates are the paragraphs with the highest cosine to any of the M vectors
(what M FAISS searches merged by score give). M = 1 is phase 1 of training from scratch (`nextpara train
--from-scratch`: the same encoder, loss, truncation, batch, learning rate, gradient clipping and epochs), so the rows
compare heads and nothing else.

Trained on the store's training split, measured on its validation split (L = 4, the context and every identical text
excluded, an identical text counting as a hit: docs/evaluation.md): the head alone at 50-300 candidates, and in the
union stage 1 serves (head 100 + the last paragraph's 100). No reranker is trained. Writes
bench/results/NAME.{md,json} (``--output``, default multi_query).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEPTHS = (50, 100, 150, 200, 300)


def build_head(cfg, n_queries: int, seed: int):
    from nextpara.attention_core.model import NextParagraphModel

    torch.manual_seed(seed)
    model = NextParagraphModel(cfg)
    extra = nn.ModuleList(nn.Linear(cfg.d_model, cfg.embed_dim) for _ in range(n_queries - 1))
    for layer in extra:  # small and different: equal corrections would get equal gradients and never part
        nn.init.normal_(layer.weight, std=0.002)
        nn.init.zeros_(layer.bias)
    return model, extra


def queries_of(model, extra, x, m) -> torch.Tensor:
    """(B, M, D) unit query vectors: the model's own and one more per extra correction."""
    query, states = model.encode(x, m)
    if not len(extra):
        return query[:, None]
    base = model.query_base(x, m)
    more = [F.normalize(base + layer(states[:, -1]), dim=-1) for layer in extra]
    return torch.stack([query, *more], 1)


def train(seq, cfg, tcfg, n_queries: int, epochs: int) -> tuple:
    from nextpara.attention_core.training import context_batch, multi_positive_nce

    model, extra = build_head(cfg, n_queries, tcfg.seed)
    params = [*model.parameters(), *extra.parameters()]
    opt = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    rng = np.random.default_rng(tcfg.seed)
    train_q = [q for q in seq.queries("train", tcfg.max_context, seed=tcfg.seed)
               if seq.text_class[q.target] not in seq.text_class[q.context]]
    vectors = torch.from_numpy(seq.vectors)
    history = []
    model.train(), extra.train()
    for epoch in range(epochs):
        started, losses = time.perf_counter(), []
        order = rng.permutation(len(train_q))
        for s in range(0, len(order), tcfg.batch_size):
            batch = [train_q[i] for i in order[s:s + tcfg.batch_size]]
            contexts = [q.context[-int(rng.integers(1, len(q.context))):]
                        if len(q.context) > 1 and rng.random() < tcfg.truncate_prob else q.context for q in batch]
            x, m = context_batch(seq, contexts, cfg.max_context)
            qs = queries_of(model, extra, x, m)  # (B, M, D)
            logits = torch.logsumexp(qs @ vectors.T / tcfg.temperature, 1)  # (B, N): the mixture's scores
            excluded = np.zeros((len(batch), len(seq)), bool)
            positive = np.zeros((len(batch), len(seq)), bool)
            for i, q in enumerate(batch):
                excluded[i, seq.same_text_rows(q.context)] = True
                positive[i, seq.same_text_rows(np.array([q.target]))] = True
            loss = multi_positive_nce(logits.masked_fill(torch.from_numpy(excluded), float("-inf")),
                                      torch.from_numpy(positive))
            if not torch.isfinite(loss):
                raise FloatingPointError(f"M={n_queries} epoch {epoch + 1}: loss became {loss.item()}")
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)  # as Trainer._epoch
            opt.step()
            losses.append(loss.item())
        history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)), "seconds": time.perf_counter() - started})
        print(f"M={n_queries} epoch {epoch + 1}/{epochs}: loss {history[-1]['loss']:.4f} "
              f"({history[-1]['seconds']:.0f} s)", flush=True)
    model.eval(), extra.eval()
    return model, extra, history


@torch.no_grad()
def recall(seq, model, extra, val_q, L: int) -> dict:
    from nextpara.attention_core.training import context_batch

    vectors = torch.from_numpy(seq.vectors)
    hits = {f"head {k}": [] for k in DEPTHS}
    union_hits, union_sizes = [], []
    for s in range(0, len(val_q), 256):
        batch = val_q[s:s + 256]
        x, m = context_batch(seq, [q.context for q in batch], L)
        head = (queries_of(model, extra, x, m) @ vectors.T).amax(1)  # (B, N): best cosine to any query vector
        last = x[:, -1] @ vectors.T
        for i, q in enumerate(batch):
            gone = torch.from_numpy(seq.same_text_rows(q.context))
            head[i, gone] = last[i, gone] = -2.0
            target = seq.text_class[q.target]
            order = torch.topk(head[i], max(DEPTHS)).indices.numpy()
            for k in DEPTHS:
                hits[f"head {k}"].append(bool((seq.text_class[order[:k]] == target).any()))
            union = np.union1d(order[:100], torch.topk(last[i], 100).indices.numpy())
            union_hits.append(bool((seq.text_class[union] == target).any()))
            union_sizes.append(len(union))
    out = {name: float(np.mean(v)) for name, v in hits.items()}
    out["head 100 + last 100"] = float(np.mean(union_hits))
    out["union size"] = float(np.mean(union_sizes))
    out["per_query_union"] = union_hits
    out["per_query_head200"] = hits["head 200"]
    return out


def main() -> None:
    from nextpara.attention_core.metrics import bootstrap
    from nextpara.attention_core.model_config import RerankerConfig
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.store.store import open_store

    ap = record.argument_parser(__doc__, __file__)
    ap.add_argument("--data-dir", required=True, help="a built store (its vectors and splits; no model is needed)")
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 4], help="query vectors per head, one run each")
    ap.add_argument("--epochs", type=int, default=TrainConfig.phase1_epochs, help="phase-1 epochs of each run")
    ap.add_argument("--queries", type=int, default=2000, help="validation queries (a seeded sample; 0: every one)")
    ap.add_argument("--output", default="multi_query", help="bench/results/NAME.{md,json}")
    args = ap.parse_args()
    torch.set_num_threads(len(os.sched_getaffinity(0)))

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    tcfg = TrainConfig()
    cfg = RerankerConfig(embed_dim=seq.vectors.shape[1])
    val_q = seq.queries("validation", 4, limit=args.queries or None, seed=1)
    runs = {}
    for n in args.heads:
        started = time.perf_counter()
        model, extra, history = train(seq, cfg, tcfg, n, args.epochs)
        runs[n] = {"history": history, "train_seconds": time.perf_counter() - started,
                   **recall(seq, model, extra, val_q, 4)}
    base = runs[args.heads[0]]
    columns = [f"head {k}" for k in DEPTHS] + ["head 100 + last 100"]
    rec = {**record.stamp(__file__), "data_dir": str(args.data_dir), "paragraphs": len(seq),
           "validation_queries": len(val_q), "epochs": args.epochs, "runs": {}}
    lines = ["# Stage-1 recall of a head with several query vectors", "",
             f"`{rec['command']}` on {rec['date']}, {rec['machine']}, commit {rec.get('commit', '?')}: {len(seq):,} "
             f"paragraphs, {len(val_q):,} validation queries, L = 4; each head trained {args.epochs} epochs on the "
             "training split, no reranker (bench/quality/multi_query.py says how).", "",
             "| query vectors | " + " | ".join(columns) + " | union size | change at head 200 [95%] | change in the union "
             "[95%] | training s |", "|" + " --- |" * (len(columns) + 5)]
    for n, run in runs.items():
        change = bootstrap({key: np.array(run[f"per_query_{key}"], float) - np.array(base[f"per_query_{key}"], float)
                            for key in ("head200", "union")}, 2000, 0)  # paired: the same queries, their hits' change
        rec["runs"][str(n)] = {**{k: v for k, v in run.items() if not k.startswith("per_query")}, "change": change}
        cells = [f"{run[c]:.3f}" for c in columns]
        diffs = [f"{change[k]:+.3f} [{change[k + '_ci'][0]:+.3f}, {change[k + '_ci'][1]:+.3f}]"
                 if n != args.heads[0] else "-" for k in ("head200", "union")]
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {run['union size']:.0f} | " + " | ".join(diffs)
                     + f" | {run['train_seconds']:.0f} |")
    record.save(args.output, rec, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
