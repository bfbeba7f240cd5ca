"""Experiment: does MiniLM's *contextual token* view of the seam tell the next paragraph from its neighbours,
where the pooled paragraph vectors do not?

    python -m bench.quality.seam_windows --data-dir DIR --work DIR [--tokens 32] [--minutes 15]

Every paragraph gets two windows, its first and its last ``--tokens`` tokens, each run through the bundled
MiniLM (frozen, all 6 layers) on its own: their token vectors are kept (float16, cached in ``--work``). A small
reader is trained on them: the last paragraph's tail tokens and a candidate's head tokens, projected to 128
dims with a position that counts from the seam, then 2 transformer layers and a score from a learned
[CLS], plus a learned multiple of the pooled vectors' cosine. So the trainable part is ~0.3M weights and
MiniLM never runs backwards: the seam cross-encoder of ``seam_reader`` learned nothing in 20 minutes of
fine-tuning, this asks whether the token vectors MiniLM already makes carry the order signal at all.

Groups come from training documents (an anchor paragraph A and 8 candidates: its successor; the two after
it and the one before a 4-paragraph context, the neighbours a vector model confuses with the next; two far
paragraphs of the same document, outside a-4 .. a+4; two of other documents, never with the successor's text),
trained listwise. Beside it,
on the same groups and loss, a *bilinear* reader of the pooled vectors (cosine + a^T W b, W 384 x 384
learned): what the vectors alone give a learned reader. Reported on validation documents' groups (the
test split is not touched): easy accuracy (successor above a far paragraph of its document, chance 0.5),
direction accuracy (above the two after it and the one before the context, chance 0.25), same-document
accuracy (above all five same-document candidates, chance 1/6). Writes bench/results/NAME.{md,json}
(default seam_windows_<the data directory's name>). The bilinear reader, trained into the scorer, is the ``bilinear`` variant of
``bench.quality.experiments`` (model config ``bilinear_last``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CANDIDATES = 8  # successor, a+2, a+3, the one before the context, far x 2, other documents x 2


def groups(seq, split: str, rng: np.random.Generator, limit: int | None = None) -> np.ndarray:
    """(n, 1 + CANDIDATES) rows: the anchor, then its successor and the seven negatives above."""
    others = seq.split_rows(split)
    out = []
    for doc, rows in seq.doc_rows.items():
        if seq.split[doc] != split or len(rows) < 10:
            continue
        for a in range(4, len(rows) - 3):
            far = [i for i in range(len(rows)) if i < a - 4 or i > a + 4]  # outside a-4 .. a+4
            if len(far) < 2:
                continue
            pick = rng.choice(far, 2, replace=False)
            other = others[rng.integers(0, len(others), 8)]
            other = other[~np.isin(other, rows) & (seq.text_class[other] != seq.text_class[rows[a + 1]])][:2]
            if len(other) < 2:
                continue
            out.append([rows[a], rows[a + 1], rows[a + 2], rows[a + 3], rows[a - 4], rows[pick[0]], rows[pick[1]], *other])
    out = np.asarray(out, np.int64)
    out = out[rng.permutation(len(out))]
    return out if limit is None else out[:limit]


def windows(texts: list[str], tokens: int, work: Path, key: str) -> tuple[np.ndarray, ...]:
    """(heads, head_len, tails, tail_len): each paragraph's first and last ``tokens`` token vectors from the
    frozen bundled MiniLM, each window run on its own; cached in ``work`` under ``key``."""
    path = work / f"windows_{key}_{tokens}.npz"
    if path.exists():
        z = np.load(path)
        return z["heads"], z["head_len"], z["tails"], z["tail_len"]
    import torch
    from nextpara.store.embedders import bundled_minilm_path
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    tok, bert = st.tokenizer, st[0].auto_model.eval()
    ids = tok(texts, add_special_tokens=False, truncation=False)["input_ids"]
    out = []
    t0 = time.perf_counter()
    for side, cut in (("heads", lambda i: i[:tokens]), ("tails", lambda i: i[-tokens:])):
        wins = [cut(i) or [tok.unk_token_id] for i in ids]
        lens = np.array([len(w) for w in wins], np.int64)
        vecs = np.zeros((len(wins), tokens, bert.config.hidden_size), np.float16)
        order = np.argsort(lens, kind="stable")
        with torch.inference_mode():
            for s in range(0, len(order), 256):
                rows = order[s:s + 256]
                n = int(lens[rows].max()) + 2
                x = torch.zeros(len(rows), n, dtype=torch.long)
                m = torch.zeros(len(rows), n, dtype=torch.long)
                for k, r in enumerate(rows):
                    w = [tok.cls_token_id, *wins[r], tok.sep_token_id]
                    x[k, :len(w)] = torch.tensor(w)
                    m[k, :len(w)] = 1
                h = bert(input_ids=x, attention_mask=m).last_hidden_state[:, 1:n - 1]
                for k, r in enumerate(rows):
                    vecs[r, :lens[r]] = h[k, :lens[r]].numpy()
                if s % 12800 == 0:
                    print(f"  {side}: {s}/{len(order)} windows, {time.perf_counter() - t0:.0f}s", flush=True)
        out += [vecs, lens]
    partial = path.with_name(path.stem + ".partial.npz")  # a killed run leaves no cache that fails to load
    np.savez(partial, heads=out[0], head_len=out[1], tails=out[2], tail_len=out[3])
    os.replace(partial, path)
    return tuple(out)


def make_reader(dim: int, tokens: int, width: int = 128, layers: int = 2):
    import torch
    from torch import nn

    class SeamWindows(nn.Module):
        """Score of (A's tail tokens, B's head tokens): 2 transformer layers over [CLS, tail, head] + a * cos."""

        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(dim, width)
            self.pos = nn.Embedding(2 * tokens + 1, width)  # tail: distance to the seam; head: tokens + place
            self.cls = nn.Parameter(torch.zeros(width))
            layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.out = nn.Linear(width, 1)
            nn.init.zeros_(self.out.weight)  # an untrained reader ranks by the cosine, as the bilinear one does
            nn.init.zeros_(self.out.bias)
            self.cos_weight = nn.Parameter(torch.tensor(10.0))

        def forward(self, tail, tail_len, head, head_len, cos):
            b, t = tail.shape[:2]
            place = torch.arange(t)
            tail_pos = (tail_len[:, None] - 1 - place).clamp(min=0)  # 0 at the seam
            x = torch.cat([self.cls.expand(b, 1, -1) + self.pos.weight[2 * t],
                           self.proj(tail) + self.pos(tail_pos), self.proj(head) + self.pos(t + place)[None]], 1)
            pad = torch.cat([torch.zeros(b, 1, dtype=torch.bool), place >= tail_len[:, None], place >= head_len[:, None]], 1)
            h = self.encoder(x, src_key_padding_mask=pad)[:, 0]
            return self.out(h).squeeze(-1) + self.cos_weight * cos

    return SeamWindows()


def make_bilinear(dim: int):
    import torch
    from torch import nn

    class Bilinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(dim, dim))
            self.cos_weight = nn.Parameter(torch.tensor(10.0))

        def forward(self, a, b, cos):
            return ((a @ self.w) * b).sum(-1) + self.cos_weight * cos

    return Bilinear()


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store (read only)")
    parser.add_argument("--work", required=True, help="directory for the window cache")
    parser.add_argument("--tokens", type=int, default=32, help="tokens in each window")
    parser.add_argument("--minutes", type=float, default=15.0, help="training budget of the window reader")
    parser.add_argument("--bilinear-epochs", type=float, default=30.0, help="passes over the training groups of the "
                        "bilinear reader (cheap: seconds each)")
    parser.add_argument("--batch", type=int, default=64, help="groups per step")
    parser.add_argument("--val-groups", type=int, default=3000)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()

    import torch
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
    heads, head_len, tails, tail_len = windows(texts, args.tokens, work, key)
    vectors = torch.from_numpy(seq.vectors / np.linalg.norm(seq.vectors, axis=1, keepdims=True))
    train, val = groups(seq, "train", rng), groups(seq, "validation", rng, args.val_groups)
    print(f"{len(seq)} paragraphs' windows ready, {len(train)} training and {len(val)} validation groups, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)

    def batch_of(g: np.ndarray):
        a, c = np.repeat(g[:, 0], CANDIDATES), g[:, 1:].ravel()
        cos = (vectors[a] * vectors[c]).sum(-1)
        return a, c, cos

    def run(net, g: np.ndarray, kind: str):
        a, c, cos = batch_of(g)
        if kind == "bilinear":
            s = net(vectors[a], vectors[c], cos)
        else:
            s = net(torch.from_numpy(tails[a].astype(np.float32)), torch.from_numpy(tail_len[a]),
                    torch.from_numpy(heads[c].astype(np.float32)), torch.from_numpy(head_len[c]), cos)
        return s.view(len(g), CANDIDATES)

    def evaluate(scores: torch.Tensor) -> dict:
        s0 = scores[:, :1]
        return {"easy_accuracy": float((s0[:, 0] > scores[:, 4]).float().mean()),
                "direction_accuracy": float((s0 > scores[:, 1:4]).all(1).float().mean()),
                "same_document_accuracy": float((s0 > scores[:, 1:6]).all(1).float().mean()),
                "group_accuracy": float((s0 > scores[:, 1:]).all(1).float().mean())}

    @torch.no_grad()
    def validate(net, kind: str) -> dict:
        net.eval()
        return evaluate(torch.cat([run(net, val[i:i + 256], kind) for i in range(0, len(val), 256)]))

    cos = batch_of(val)[2]
    rows = [{"reader": "pooled cosine (no training)", **evaluate(cos.view(-1, CANDIDATES))}]
    print(rows[-1], flush=True)
    readers = {"bilinear": make_bilinear(vectors.shape[1]), "windows": make_reader(heads.shape[2], args.tokens)}
    for kind, net in readers.items():
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3 if kind == "windows" else 3e-4, weight_decay=0.01)
        started, seen, history, losses = time.perf_counter(), 0, [], []
        while ((time.perf_counter() - started < args.minutes * 60) if kind == "windows"
               else seen < args.bilinear_epochs * len(train)):
            net.train()
            g = train[seen % len(train):seen % len(train) + args.batch]
            loss = torch.nn.functional.cross_entropy(run(net, g, kind), torch.zeros(len(g), dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            seen += len(g)
            if len(losses) % 300 == 0:
                m = validate(net, kind)
                history.append({"groups_seen": seen, "loss": float(np.mean(losses[-300:])), **m})
                print(f"{kind}: {seen} groups, {time.perf_counter() - started:.0f}s, loss {history[-1]['loss']:.3f} {m}",
                      flush=True)
        m = validate(net, kind)
        label = ("bilinear over pooled vectors" if kind == "bilinear" else
                 f"reader of {args.tokens}-token windows")
        rows.append({"reader": label, "seconds": round(time.perf_counter() - started), "groups_seen": seen,
                     "epochs": round(seen / len(train), 2), "history": history, **m})
        print(rows[-1]["reader"], m, flush=True)
    net = readers["windows"]
    with torch.no_grad():
        net.eval()
        t1 = time.perf_counter()
        for _ in range(5):
            run(net, np.tile(val[:1], (19, 1)), "windows")  # 19 x 8 = 152 pairs: one served list
        ms = (time.perf_counter() - t1) / 5 * 1000

    name = args.output or f"seam_windows_{store.data_dir.path.name}"
    stamp = record.stamp(__file__)
    lines = [f"# Seam windows on {store.data_dir.path.name} ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"{len(train)} training groups, {len(val)} validation groups of {CANDIDATES} candidates; the window "
             f"reader trained {args.minutes:g} minutes, the bilinear one {args.bilinear_epochs:g} epochs; the window reader scores 152 pairs (one served list) in {ms:.0f} ms "
             "(its windows precomputed).", "",
             "| reader | easy (chance 0.5) | direction (chance 0.25) | same document (chance 0.17) | all 8 (chance 0.125) | epochs |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['reader']} | {r['easy_accuracy']:.3f} | {r['direction_accuracy']:.3f} | "
                     f"{r['same_document_accuracy']:.3f} | {r['group_accuracy']:.3f} | {r.get('epochs', '')} |")
    record.save(name, {**stamp, "tokens": args.tokens, "training_groups": len(train), "validation_groups": len(val),
                       "ms_per_152_pairs": round(ms, 1), "rows": rows}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
