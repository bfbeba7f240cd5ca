"""``run_job``: read INPUT, skip what OUTPUT already holds, score the rest with an engine, append."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .output import ResumableOutput
from .rows import Row, count_rows, dumps, parse_row, read_raw

log = logging.getLogger(__name__)


@dataclass
class JobSummary:
    input: str
    output: str
    engine: str
    rows: int = 0  # rows written by this run
    errors: int = 0  # of which error rows
    skipped: int = 0  # rows already in OUTPUT from an earlier run
    seconds: float = 0.0
    torn_bytes: int = 0  # a partial last line of OUTPUT removed before appending
    model_version: str = ""

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        resumed = f", {self.skipped} already in OUTPUT skipped" if self.skipped else ""
        torn = f", a torn last line ({self.torn_bytes} bytes) removed first" if self.torn_bytes else ""
        return (f"rerank-batch: {self.rows} rows written ({self.errors} errors){resumed}{torn} in {self.seconds:.1f}s, "
                f"{self.rows_per_second:.0f} rows/s, engine {self.engine}, model {self.model_version or '?'} -> {self.output}")


def pending_rows(input_path: str | Path, out: ResumableOutput, default_top_k: int, on_skip) -> Iterator[Row]:
    """Input rows not yet in OUTPUT, in order; a repeated id becomes an error row."""
    first_line: dict[str, int] = {}
    occurrences: Counter[str] = Counter()
    for line, raw in read_raw(input_path):
        row = parse_row(line, raw, default_top_k)
        key = row.key
        if key is not None:
            occurrence = occurrences[key]
            occurrences[key] += 1
            first_line.setdefault(key, line)
            if occurrence and row.error is None:
                row.error = f"duplicate id (first at line {first_line[key]})"
        else:
            occurrence = 0
        if out.is_done(key, occurrence, line):
            on_skip()
            continue
        yield row


def run_job(input_path: str | Path, output_path: str | Path, engine, default_top_k: int = 10,
            overwrite: bool = False, quiet: bool = False) -> JobSummary:
    summary = JobSummary(str(input_path), str(output_path), engine.name)
    total = count_rows(input_path)
    index_version = getattr(engine, "index_version", None)
    out = ResumableOutput(output_path, overwrite=overwrite, input_path=input_path, index_version=index_version,
                          settings={  # what the rows depend on
                              "top_k": default_top_k, "with_text": getattr(engine, "with_text", True),
                              "model_version": getattr(engine, "model_version", ""),
                              "store_id": getattr(engine, "store_id", "")})
    if out.index_then is not None:  # a live store's writes are no reason to refuse; but the rows will differ in kind
        log.warning("the rows already in %s were ranked at index generation %d, and the store is at %d now: the rows "
                    "this run adds may find paragraphs written since, which those could not (--overwrite ranks every "
                    "row at one generation)", output_path, out.index_then, index_version)
    summary.torn_bytes = out.torn_bytes
    started = time.perf_counter()
    try:
        with _progress(total, quiet) as bar:
            def skipped() -> None:
                summary.skipped += 1
                bar.update(1)

            for outputs in engine.run(pending_rows(input_path, out, default_top_k, skipped)):
                out.append([dumps(o) for o in outputs])
                summary.rows += len(outputs)
                summary.errors += sum("error" in o for o in outputs)
                bar.update(len(outputs))
                bar.set_postfix(errors=summary.errors)
    finally:
        out.close()
        summary.seconds = time.perf_counter() - started
        summary.model_version = getattr(engine, "model_version", "")
    return summary


class _NoBar:
    """Stands in for the progress bar where tqdm is not installed (a client-only install)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw) -> None:
        pass


def _progress(total: int | None, quiet: bool):
    try:
        from nextpara.progress import progress_bar
    except ModuleNotFoundError:
        return _NoBar()
    return progress_bar(total=total, desc="rerank-batch", unit="row", quiet=quiet)
