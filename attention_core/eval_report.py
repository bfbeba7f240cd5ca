"""Running ``nextpara eval``: load what the store has, evaluate, print the table, write JSON and plots."""

from __future__ import annotations

import json
import logging
import platform
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
LABELS = {"B1": "B1 cosine(last)", "B2": "B2 cosine(mean)", "B3": "B3 successors of last's neighbours",
          "B4": "B4 linear map", "head": "query head alone", "full": "full pipeline (reranked)"}


def _ci(m: dict, key: str) -> str:
    lo, hi = m.get(f"{key}_ci", [m[key], m[key]])
    return f"{m[key]:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown_table(result: dict) -> str:
    lines = ["| method | Recall@1 | Recall@10 | MRR@10 | stage-1 recall (candidates) | latency mean / p95 ms |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, m in result["methods"].items():
        lines.append(f"| {LABELS.get(name, name)} | {_ci(m, 'recall@1')} | {_ci(m, 'recall@10')} | {_ci(m, 'mrr@10')} | "
                     f"{m['stage1_recall']:.3f} ({m['stage1_candidates']:.0f}) | "
                     f"{m['latency_ms_mean']:.1f} / {m['latency_ms_p95']:.1f} |")
    lines += ["", "Brackets: 95% bootstrap intervals over the queries. Stage-1 recall: the share of queries whose target "
              "is among the candidates the reranker scores (their mean number in parentheses). B1-B4 rank without a "
              "trained model: B1 by cosine to the last context paragraph, B2 to the context's mean, B3 the paragraphs "
              "after the last one's nearest neighbours, B4 a ridge regression from the last and mean vectors to the next."]
    lengths = next(iter(result["context_length"].values())).keys()
    read = result.get("config", {}).get("context_length", "L")  # the main table's context length
    differs = (f" (so L = {read} here differs a little from the table above, which excludes the {read} read)"
               if read != 8 else "")
    lines += ["", f"Recall@1 (MRR@10) against context length L, same 8 preceding paragraphs excluded at every L{differs}:",
              "",
              "| method | " + " | ".join(f"L={L}" for L in lengths) + " |", "| --- |" + " --- |" * len(lengths)]
    for name, by_len in result["context_length"].items():
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(
            f"{v['recall@1']:.3f} ({v['mrr@10']:.3f})" for v in by_len.values()) + " |")
    reads = result.get("model_max_context")
    longer = [L for L in lengths if reads and int(L) > reads]  # (reads: set where a model ranks, "full")
    if longer:  # a model trained with --max-context below the longest L
        lines += ["", f"The model reads at most {reads} context paragraphs (its --max-context): at L = "
                  f"{', '.join(longer)} the full pipeline is given more than it reads, and drops the oldest."]
    return "\n".join(lines + change_table(result["context_length"]))


def change_table(ablation: dict) -> list[str]:
    """Lines of the ablation's paired changes from each length to the next (none in a result from before them)."""
    lengths = list(next(iter(ablation.values())))
    steps = list(zip(lengths[:-1], lengths[1:]))
    if not any("change" in by_len[b] for by_len in ablation.values() for _, b in steps):
        return []

    lines = ["", "Change in Recall@1 (MRR@10) from one length to the next, paired: the same queries at both lengths, "
             "with the 95% interval of the difference:", "",
             "| method | " + " | ".join(f"L={a} to {b}" for a, b in steps) + " |", "| --- |" + " --- |" * len(steps)]
    for name, by_len in ablation.items():
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(
            f"{signed(by_len[b]['change'], 'recall@1')} ({by_len[b]['change']['mrr@10']:+.3f})" for _, b in steps) + " |")
    first = next(iter(ablation.values()))
    if all("queries_given_more" in first[b]["change"] for _, b in steps):  # (not in a result from before it)
        lines.append("| queries given more paragraphs | " + " | ".join(
            f"{first[b]['change']['queries_given_more']} of {first[b]['change']['queries']}" for _, b in steps) + " |")
        lines += ["", "A query holds at most the paragraphs before its target, so only the queries holding more than "
                  "the shorter length (last row) are given more at the longer one; the others get the same context "
                  "twice and add 0 to the change, which is a mean over every query."]
    return lines


def signed(change: dict, metric: str) -> str:
    """A paired change (metrics.paired_gain) of ``metric`` with its interval, signs shown: "+0.013 [+0.003, +0.024]"."""
    lo, hi = change.get(f"{metric}_ci", [change[metric]] * 2)
    return f"{change[metric]:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def attention_example(evaluation) -> dict | None:
    """The attention weights of the top prediction for the first test query with a full context."""
    full = [q for q in evaluation.targets if len(q.context) >= evaluation.L]
    if evaluation.pipeline is None or not full:
        return None
    q = full[0]
    ctx = evaluation.context(q, evaluation.L)
    scored = evaluation.pipeline.retrieve([ctx], [evaluation.exclude_ids(q, evaluation.L)],
                                          [evaluation.context_texts(q, evaluation.L)], need_weights=True)[0]
    if scored.attention is None:  # a scorer without cross-attention (the fast one) has no weights to show
        return None
    L = evaluation.pipeline.max_context
    weights = scored.attention[:, L - len(ctx):]  # (h, n): drop padding positions
    texts = [p.text for p in evaluation.store.get_paragraphs([int(evaluation.seq.ids[r]) for r in q.context[-evaluation.L:]])]
    top = scored.paragraphs[0]
    return {"context": texts, "top_prediction": {"doc_id": top.doc_id, "position": top.position, "text": top.text},
            "target_doc": evaluation.seq.doc_ids[q.target], "weights": weights.tolist()}


def write_plots(result: dict, plot_dir: Path) -> list[Path]:
    """The plots' PNGs in ``plot_dir`` (plottable() has checked it and matplotlib before the evaluation ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, curve in result["recall_curves"].items():
        ax.plot(range(1, len(curve) + 1), curve, label=LABELS.get(name, name))
    ax.set_xscale("log")
    ax.set_xlabel("k")
    ax.set_ylabel("Recall@k")
    ax.set_title("Next-paragraph Recall@k by method")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(plot_dir / "recall_at_k.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    example = result.get("attention_example")
    if example:
        w = np.asarray(example["weights"])
        fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * w.shape[1] + 2), 0.6 * w.shape[0] + 1.8))
        im = ax.imshow(w, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        for (i, j), v in np.ndenumerate(w):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.6 else "black", fontsize=8)
        ax.set_xticks(range(w.shape[1]), [f"ctx -{w.shape[1] - j}" for j in range(w.shape[1])])
        ax.set_yticks(range(w.shape[0]), [f"head {i}" for i in range(w.shape[0])])
        ax.set_title("Attention of the top prediction over the context")
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        paths.append(plot_dir / "attention_example.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def run_evaluation(data_dir, n_queries: int = 2000, context_length: int = 4, output: str | None = None,
                   plot_dir: str | None = None, latency_queries: int = 100, seed: int = 0,
                   model: str | None = None, quiet: bool = False) -> dict:
    """The protocol on the store in ``data_dir`` with the model that serves it (general.py), or ``model``: a
    checkpoint's path, or "general" for the packaged general model (its word weights fitted on this store)."""
    from nextpara.store.store import open_store

    from .evaluation import Evaluation, check_settings

    check_settings(n_queries, context_length, latency_queries)  # before the store and the model load
    if output is not None:  # ('' too: it was taken for not given)
        writable_output(output)
    if plot_dir is not None:
        plottable(plot_dir)
    started = time.perf_counter()
    with open_store(data_dir, readonly=True) as store:
        seq, embedder, pipeline, meta = evaluation_parts(store, model)
        ev = Evaluation(store, seq, embedder, pipeline, n_queries=n_queries, context_length=context_length, seed=seed,
                        quiet=quiet)
        result = ev.evaluate(latency_queries=latency_queries)
        result["attention_example"] = attention_example(ev)
        result["config"] = {"data_dir": str(store.data_dir), "queries": len(ev.targets), "context_length": context_length,
                            "seed": seed, "embedder": store.embedder_name, "paragraphs": len(seq),
                            "model_version": meta["model_version"] if meta else None,
                            "model_source": meta["source"] if meta else None,
                            "index_generation": store.generation, "machine": f"{platform.machine()}, {_cores()} cores",
                            "date": time.strftime("%Y-%m-%d"), "seconds": round(time.perf_counter() - started, 1)}
    try:
        if plot_dir:  # first: --output holds their paths, as --json shows them
            result["plots"] = [str(p) for p in write_plots(result, Path(plot_dir))]
    finally:  # the results are written even if the plots could not be
        if output:
            try:
                Path(output).write_text(json.dumps(result, indent=2) + "\n")
            except OSError as e:  # a write error (a full disk) names no file: this says which
                raise OSError(e.errno, f"cannot write the results to {output}: {e.strerror or e}") from e
    return result


def plottable(plot_dir: str) -> None:
    """FailedPreconditionError or InvalidInputError unless the plots can be written into ``plot_dir`` (matplotlib
    installed, the folder there or makeable): checked before minutes of evaluation, as --output is."""
    import importlib.util

    from nextpara.errors import FailedPreconditionError, InvalidInputError

    if not plot_dir.strip():
        raise InvalidInputError("--plot is empty: give a folder name")
    if importlib.util.find_spec("matplotlib") is None:
        raise FailedPreconditionError("--plot needs matplotlib: pip install 'nextpara[plot]'")
    path = Path(plot_dir)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise InvalidInputError(f"--plot {plot_dir}: {existing} is a file, not a folder")


def writable_output(output: str) -> None:
    """InvalidInputError unless ``output`` is a file that can be written: checked before minutes of evaluation."""
    import os

    from nextpara.errors import InvalidInputError

    if not output.strip():
        raise InvalidInputError("--output is empty: give a file name")
    path = Path(output)
    folder = path.resolve().parent
    if path.is_dir():
        raise InvalidInputError(f"--output {output}: a folder; give a file name for the JSON results")
    if not folder.is_dir():
        raise InvalidInputError(f"--output {output}: " + (f"{folder} is a file, not a folder" if folder.is_file()
                                                          else f"the folder {folder} does not exist"))
    if not os.access(folder if not path.exists() else path, os.W_OK):
        raise InvalidInputError(f"--output {output}: not writable by this user")


def evaluation_parts(store, model: str | None = None):
    """What an Evaluation of ``store`` needs: (its ParagraphSequences, its text embedder or None for precomputed
    vectors, the RerankPipeline of the model that serves it, or of ``model`` (a checkpoint's path, or "general"), or
    None if no model serves it, and that model's metadata or None)."""
    from nextpara.errors import FailedPreconditionError, Reason
    from nextpara.store.embedders import PrecomputedEmbedder

    from .general import checkpoint_for_store, general_for_store, served_model
    from .pipeline import RerankPipeline
    from .sequences import ParagraphSequences

    seq = ParagraphSequences(store)
    embedder = store.query_embedder()
    if isinstance(embedder, PrecomputedEmbedder):
        embedder = None
    meta = None
    if model == "general":
        net, meta = general_for_store(store)
    elif model:
        net, meta = checkpoint_for_store(model, store)
        meta = {**meta, "source": model}
    else:
        try:
            net, meta = served_model(store)
        except FailedPreconditionError as e:
            if e.reason != Reason.NO_MODEL:  # a model there that cannot be read: what serves is unknown, not absent
                raise
            log.warning("no model serves %s, evaluating the baselines only: %s", store.data_dir, e)
    return seq, embedder, (RerankPipeline(net, store) if meta is not None else None), meta


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
