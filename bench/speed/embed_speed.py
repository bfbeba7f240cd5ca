"""Embedding speed: sentence-transformers' default ``encode`` against our embedder's modes.

    python -m bench.speed.embed_speed
    python -m bench.speed.embed_speed --no-int8 --output embed_speed_onnx   # in a venv with sentence-transformers[onnx]

The same 5,000 PEPs paragraphs (a seeded sample) go through:

* ``st_default``: ``SentenceTransformer(bundled MiniLM).encode(texts)`` with its defaults (batch 32);
* ``minilm``: our embedder at batch 64 (its default when first measured; now 32, as ``st_default``);
* ``minilm-int8``: our embedder with every linear layer quantised to int8 (torch dynamic
  quantisation, per output channel), at batch 64 and 128;
* experiments: int8 per tensor, int8 on the feed-forward or the attention layers only, and
  ONNX Runtime through sentence-transformers' ``backend="onnx"`` (the model exported offline;
  fp32, O3 graph optimisation, int8 dynamic quantisation for AVX-512 VNNI) when
  ``sentence-transformers[onnx]`` is installed (it is not a nextpara dependency).

Each mode embeds the texts once to warm up on 200 of them, then all 5,000, timed. Agreement is
the cosine of every vector to ``st_default``'s (min, 1st percentile, mean).

The MRR@10 criterion is judged only for a mode that meets the first two (none has, so far).
Prints tables, writes bench/results/embed_speed.{json,md}.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.record import BENCH, argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEFAULT_CORPUS = BENCH.parents[1] / "shared" / "corpora" / "peps.jsonl"


def sample_paragraphs(corpus: str, n: int, seed: int) -> list[str]:
    from nextpara.store.corpus import CorpusReader

    texts = [p for doc in CorpusReader(corpus) for p in doc.paragraphs]
    pick = np.random.default_rng(seed).choice(len(texts), size=min(n, len(texts)), replace=False)
    return [texts[i] for i in pick]


def timed_embed(embed, texts: list[str]) -> tuple[np.ndarray, float]:
    embed(texts[:200])
    t0 = time.perf_counter()
    vecs = embed(texts)
    return np.asarray(vecs, dtype=np.float32), time.perf_counter() - t0


def agreement(vecs: np.ndarray, ref: np.ndarray) -> dict:
    a = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    b = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    cos = (a * b).sum(1)
    return {"cos_min": round(float(cos.min()), 5), "cos_p1": round(float(np.percentile(cos, 1)), 5),
            "cos_mean": round(float(cos.mean()), 5), "below_0_99": int((cos < 0.99).sum())}


def int8_variant(path: str, which: str, per_channel: bool):
    """A SentenceTransformer with some linear layers dynamically quantised to int8 (experiments)."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

        model = SentenceTransformer(path, device="cpu")
        names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        pick = {"all": names, "attention": [n for n in names if ".attention." in n],
                "ffn": [n for n in names if ".attention." not in n]}[which]
        qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
        return quantize_dynamic(model, {n: qconfig for n in pick}, dtype=torch.qint8)


def onnx_models(path: str) -> list[tuple[str, object]]:
    """sentence-transformers' ONNX backend on a temporary copy of the model: fp32 as exported, graph
    optimised (O3), and dynamically quantised to int8 for AVX-512 VNNI. Empty if onnxruntime or
    optimum is not installed (``pip install 'sentence-transformers[onnx]'``)."""
    try:
        import onnxruntime  # noqa: F401
        from sentence_transformers import (
            SentenceTransformer,
            export_dynamic_quantized_onnx_model,
            export_optimized_onnx_model,
        )
    except ImportError as e:
        print(f"ONNX modes skipped: {e}", flush=True)
        return []
    copy = Path(tempfile.mkdtemp(prefix="minilm-onnx-")) / "model"
    shutil.copytree(path, copy)
    base = SentenceTransformer(str(copy), device="cpu", backend="onnx")  # exports model.onnx
    base.save_pretrained(str(copy))
    export_optimized_onnx_model(base, "O3", str(copy))
    export_dynamic_quantized_onnx_model(base, "avx512_vnni", str(copy))
    out = [("ONNX Runtime fp32", base)]
    for label, file in (("ONNX Runtime O3 graph optimisation", "onnx/model_O3.onnx"),
                        ("ONNX Runtime int8 (dynamic, AVX-512 VNNI)", "onnx/model_qint8_avx512_vnni.onnx")):
        out.append((label, SentenceTransformer(str(copy), device="cpu", backend="onnx", model_kwargs={"file_name": file})))
    return out


def speed(texts: list[str], int8: bool = True) -> dict:
    from nextpara.store.embedders import SentenceTransformerEmbedder, bundled_minilm_path
    from sentence_transformers import SentenceTransformer

    path = str(bundled_minilm_path())
    st = SentenceTransformer(path, device="cpu")
    ref, seconds = timed_embed(lambda t: st.encode(t, show_progress_bar=False), texts)
    rows, vecs = {"st_default": {"seconds": seconds}}, {"st_default": ref}
    st = None  # free the model before the next ones load

    def encoder(model, batch):
        return lambda t: model.encode(t, batch_size=batch, show_progress_bar=False)

    modes = [("minilm", lambda: SentenceTransformerEmbedder(path, name="m", batch_size=64).embed),
             ("minilm-int8 (per-channel, every linear layer), batch 64",
              lambda: SentenceTransformerEmbedder(path, name="m", batch_size=64, int8=True).embed),
             ("minilm-int8, batch 128", lambda: SentenceTransformerEmbedder(path, name="m", batch_size=128, int8=True).embed),
             ("int8 per-tensor, every linear layer", lambda: encoder(int8_variant(path, "all", False), 64)),
             ("int8 per-channel, feed-forward layers only", lambda: encoder(int8_variant(path, "ffn", True), 64)),
             ("int8 per-channel, attention layers only", lambda: encoder(int8_variant(path, "attention", True), 64))]
    if not int8:
        modes = modes[:1]
    modes += [(label, lambda m=model: encoder(m, 64)) for label, model in onnx_models(path)]
    for name, make in modes:
        vecs[name], seconds = timed_embed(make(), texts)
        rows[name] = {"seconds": seconds}
        print(f"{name}: {len(texts) / seconds:.1f} paragraphs/s", flush=True)
    for name, row in rows.items():
        row.update(paragraphs_per_second=round(len(texts) / row["seconds"], 1),
                   speedup=round(rows["st_default"]["seconds"] / row["seconds"], 2), **agreement(vecs[name], ref))
        row["seconds"] = round(row["seconds"], 1)
    return rows


def library_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "sentence-transformers", "transformers", "onnxruntime", "optimum"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def markdown(record: dict) -> str:
    lines = [f"# Embedding speed\n\n`{record['command']}` on {record['date']}, {record['machine']}; "
             f"{record['paragraphs']:,} PEPs paragraphs (seeded sample), cosine against `st_default`'s vectors; "
             f"{record['libraries']}.\n",
             "| mode | seconds | paragraphs/s | speedup | cos min | cos p1 | cos mean | vectors below 0.99 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in record["speed"].items():
        lines.append(f"| {name} | {r['seconds']} | {r['paragraphs_per_second']} | {r['speedup']}x | {r['cos_min']} | "
                     f"{r['cos_p1']} | {r['cos_mean']} | {r['below_0_99']} |")
    lines.append(f"\nTargets (>= 2x paragraphs/s, every cosine >= 0.99, MRR@10 within 0.005): {record['verdict']}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--paragraphs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-int8", action="store_true", help="skip the int8 modes (for a second run in an ONNX venv)")
    parser.add_argument("--output", default="embed_speed", help="name under bench/results/")
    args = parser.parse_args()
    import torch

    texts = sample_paragraphs(args.corpus, args.paragraphs, args.seed)
    record = {**stamp(__file__),
              "machine": f"{os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads",
              "paragraphs": len(texts), "speed": speed(texts, int8=not args.no_int8),
              "libraries": library_versions()}
    fast = [r for n, r in record["speed"].items() if n not in ("st_default", "minilm")]
    ok = any(r["speedup"] >= 2 and r["below_0_99"] == 0 for r in fast)
    record["verdict"] = ("speed and cosine met: judge MRR@10 next" if ok else
                         "not met: no mode is both >= 2x and >= 0.99 cosine on every vector, so MRR@10 was not measured")
    save(args.output, record, markdown(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
