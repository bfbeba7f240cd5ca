"""Training experiments on a built PEPs store, judged on the validation split only.

    python bench/experiments.py --data-dir /tmp/peps-bench [--keep DIR] NAME [NAME ...]

Each named variant trains from scratch into a scratch copy of the store's model file and
records its validation metrics (the pipeline's MRR@10 / Recall@1 / stage-1 recall on 1,000
validation queries) and training time in bench/results/experiments.json; the test split is
left for `nextpara eval` on the chosen default. Negative results stay in the record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "experiments.json"

VARIANTS = {
    "default": ({}, {}),
    "phase1x8": ({}, {"phase1_epochs": 8}),
    "no_query_loss_in_phase2": ({}, {"phase2_query_weight": 0.0}),
    "wide384": ({"d_model": 384, "n_heads": 6}, {}),
    "deep3": ({"n_context_layers": 3}, {}),
    "lr3e-4": ({}, {"lr": 3e-4, "phase1_epochs": 6}),
    "candidates50": ({}, {"n_candidates": 50}),
    "list1": ({"n_list_layers": 1}, {}),
    "list2": ({"n_list_layers": 2}, {}),
    "list1_d128": ({"n_list_layers": 1, "d_model": 128}, {}),
    "d128": ({"d_model": 128}, {}),
    "p2lr3e-4": ({}, {"phase2_lr": 3e-4}),  # from here on the default width is 128
    "p2lr3e-4_x8": ({}, {"phase2_lr": 3e-4, "phase2_epochs": 8, "patience": 3}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy each variant's model to DIR/NAME.safetensors")
    parser.add_argument("names", nargs="+", choices=sorted(VARIANTS))
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nextpara").setLevel(logging.INFO)
    from nextpara.attention_core.training import TrainConfig, train

    record = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in args.names:
        model_cfg, train_cfg = VARIANTS[name]
        with tempfile.TemporaryDirectory(dir=Path(args.data_dir).parent) as tmp:
            scratch = Path(tmp) / "store"
            scratch.mkdir()
            for f in Path(args.data_dir).iterdir():  # share the store read-only; the model goes to scratch
                if f.name not in ("model.safetensors", "write.lock"):
                    (scratch / f.name).symlink_to(f.resolve())
            t0 = time.perf_counter()
            cfg = TrainConfig(**train_cfg)
            meta = train(scratch, model_cfg, cfg, quiet=True)
            seconds = round(time.perf_counter() - t0, 1)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(scratch / "model.safetensors", Path(args.keep) / f"{name}.safetensors")
        v = meta["metrics"]["validation"]
        record[name] = {"model_config": model_cfg, "train_config": asdict(cfg), "seconds": seconds,
                        "validation": v, "history": meta["training"]["history"],
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        RESULTS.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{name}: validation MRR@10 {v['mrr@10']:.4f} R@1 {v['recall@1']:.4f} stage-1 {v['stage1_recall']:.3f} "
              f"in {seconds}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
