"""Progress bars for long steps: tqdm on a terminal, silent when output is not one or --quiet."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress_bar(iterable=None, *, desc: str, unit: str, total: int | None = None, quiet: bool = False):
    disable = quiet or not sys.stderr.isatty()
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, smoothing=0.1)
