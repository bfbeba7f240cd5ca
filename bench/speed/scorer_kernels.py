"""Two kernels of the scorer at the shapes serving and batch jobs give them: fused against written-out attention, and
torch's top-k against NumPy's selection for the pool density.

    python -m bench.speed.scorer_kernels [--repeat 50] [--output scorer_kernels]

* attention: ``F.scaled_dot_product_attention`` (the fused kernel, what the model runs unless attention weights are
  asked for) against ``model.reference_attention`` (the formula written out) on random (B, 4 heads, Tq, 32) queries over
  Tk keys with a key mask, in inference mode: Tk = 8 is the context (max_context), Tq = 8 the context encoder,
  Tq = 100-150 a list of candidates, Tk = 150 a candidate list's self-attention (list layers). Written out for the
  context's few keys was tried on the serving path and dropped: not faster beyond this machine's noise
  (bench/speed/README.md, Serving latency);
* pool density: the sum of each candidate's 20 largest cosines to the others of its list (B lists of K), by
  ``torch.topk(sorted=False)`` and by ``np.partition`` (what ``NextParagraphModel.pool`` uses where no gradient is
  needed).

Median ms of ``--repeat`` calls each, in one run, with the ratio of the two and the largest difference between their
results. Prints a table, writes bench/results/NAME.{json,md}.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench.record import argument_parser, save, stamp

ATTENTION_SHAPES = [(1, 8, 8), (16, 8, 8), (256, 8, 8), (16, 150, 8), (256, 100, 8), (16, 150, 32), (16, 150, 150)]
POOL_SHAPES = [(1, 150), (16, 150), (256, 100)]


def median_ms(fn, repeat: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--output", default="scorer_kernels")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from nextpara.attention_core.model import POOL_TOP, reference_attention

    torch.manual_seed(0)
    attention, pool = [], []
    with torch.inference_mode():
        for B, Tq, Tk in ATTENTION_SHAPES:
            q, k, v = torch.randn(B, 4, Tq, 32), torch.randn(B, 4, Tk, 32), torch.randn(B, 4, Tk, 32)
            mask = torch.rand(B, 1, Tq, Tk) > 0.3
            mask[..., -1] = True
            fused = median_ms(lambda q=q, k=k, v=v, mask=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                              args.repeat)
            written = median_ms(lambda q=q, k=k, v=v, mask=mask: reference_attention(q, k, v, mask), args.repeat)
            diff = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask) - reference_attention(q, k, v, mask)[0]).abs().max()
            attention.append({"B": B, "Tq": Tq, "Tk": Tk, "fused_ms": round(fused, 3), "written_out_ms": round(written, 3),
                              "max_abs_difference": float(diff)})
        for B, K in POOL_SHAPES:
            c = F.normalize(torch.randn(B, K, 384), dim=-1)
            others = (c @ c.transpose(1, 2)).masked_fill(torch.eye(K, dtype=torch.bool), float("-inf"))
            a = others.numpy()
            topk = median_ms(lambda o=others: o.topk(POOL_TOP, dim=-1, sorted=False).values.sum(-1), args.repeat)
            part = median_ms(lambda a=a, K=K: np.partition(a, K - POOL_TOP, axis=-1)[..., K - POOL_TOP:].sum(-1), args.repeat)
            diff = (others.topk(POOL_TOP, dim=-1, sorted=False).values.sum(-1)
                    - torch.from_numpy(np.partition(a, K - POOL_TOP, axis=-1)[..., K - POOL_TOP:].sum(-1))).abs().max()
            pool.append({"B": B, "K": K, "topk_ms": round(topk, 3), "partition_ms": round(part, 3),
                         "max_abs_difference": float(diff)})

    record = {**stamp(__file__), "torch_threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0)),
              "attention": attention, "pool_density": pool}
    lines = [f"# Scorer kernels ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"{record['cores']} cores, torch threads {record['torch_threads']}; median of {args.repeat} calls.", "",
             "| attention: B x Tq queries over Tk keys (4 heads of 32) | fused ms | written out ms | written / fused | "
             "largest difference |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['B']} x {r['Tq']} over {r['Tk']} | {r['fused_ms']} | {r['written_out_ms']} | "
              f"{r['written_out_ms'] / r['fused_ms']:.2f}x | {r['max_abs_difference']:.1e} |" for r in attention]
    lines += ["", f"| pool density: B lists of K, sum of the {POOL_TOP} largest | torch.topk ms | np.partition ms | "
              "partition / topk | largest difference |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['B']} x {r['K']} | {r['topk_ms']} | {r['partition_ms']} | {r['partition_ms'] / r['topk_ms']:.2f}x | "
              f"{r['max_abs_difference']:.1e} |" for r in pool]
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
