"""The job's OUTPUT file: append-only JSON Lines that a rerun resumes.

On open, an existing OUTPUT is read: a last line without its newline (the job was killed while
writing it) is cut off, and the ids (or, for rows without a readable id, the input lines) already
answered are counted so the rerun skips them and appends the rest. Each chunk of rows is
written with one write, then flushed and fsynced before the job reads on: a row on disk is done.

What made the rows (the default top_k, whether they carry texts, the model's version, the store's identity, and the
INPUT: its size and sha256 when the job last began) is written beside OUTPUT, as ``OUTPUT.job.json``, before its first
row; a rerun with other settings is refused rather than mixing two kinds of row in one file, and so are rows with no
readable job file beside them, and a rerun with an INPUT whose first bytes are not those the rows were made from, or
whose last line then has grown (rows appended to a JSON Lines INPUT's end are resumed as new).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

from nextpara.errors import InvalidInputError


class OutputError(InvalidInputError):
    """OUTPUT exists but is not a file this job can resume."""


class ResumableOutput:
    def __init__(self, path: str | Path, settings: dict, overwrite: bool = False, input_path: str | Path | None = None,
                 index_version: int | None = None):
        """``input_path``: the INPUT, whose bytes a resumed OUTPUT's rows must have been made from. ``index_version``:
        the store's generation the rows are ranked at; a resume at another keeps the first in the job file and sets
        ``index_then`` (the rows so far could not find what was written since: the job says so, and goes on)."""
        self.path, self.input_path = Path(path), input_path
        self.index_then: int | None = None
        if index_version is not None:
            settings = {**settings, "index_version": index_version}
        self.settings_path = self.path.with_name(self.path.name + ".job.json")
        self.done_keys: Counter[str] = Counter()  # json.dumps(id) -> rows with that id already in OUTPUT
        self.done_lines: set[int] = set()  # input lines of error rows that had no readable id
        self.torn_bytes = 0  # bytes of a partial last line removed on open
        try:
            if overwrite or not self.path.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._write_settings({**settings, **self._check_input(None)})
                self._file = open(self.path, "wb")
            else:
                if self.path.is_dir():
                    raise IsADirectoryError(21, "Is a directory", str(self.path))
                begun, kept = self._check_settings(settings)
                self._scan()
                self._keep_settings(begun, kept, index_version)
                self._file = open(self.path, "ab")
        except OSError as e:  # a folder, a read-only place, a file where a folder should be: OUTPUT, not a helper file
            raise OutputError(f"OUTPUT {self.path} cannot be written: {e.strerror or e}"
                              + (f" ({e.filename})" if e.filename and str(e.filename) != str(self.path) else "")) from e

    def _write_settings(self, settings: dict) -> None:
        """OUTPUT.job.json, whole or not at all (a temporary file renamed over it), before OUTPUT's first row."""
        tmp = self.settings_path.with_name(self.settings_path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(settings, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.settings_path)

    def _check_settings(self, settings: dict) -> tuple[dict, dict]:
        """Refuse to resume with settings other than those OUTPUT was begun with (OutputError naming each), or rows
        whose settings are unknown (no readable OUTPUT.job.json: they could be of another store or model), or another
        INPUT. The job file as it was ({} for an empty OUTPUT without one) and as it is to be (an older one gets the
        settings it lacks, and the INPUT as it is now)."""
        try:
            begun = json.loads(self.settings_path.read_text()) if self.settings_path.exists() else None
        except (ValueError, OSError):
            begun = None
        if not isinstance(begun, dict):
            if self.path.stat().st_size == 0:  # nothing to mix with: this job's settings from now on
                return {}, {**settings, **self._check_input(None)}
            raise OutputError(f"{self.path} holds rows but no readable {self.settings_path.name} saying what made them "
                              "(the store, the model, -k, --no-text): they may not be this job's to resume; give another "
                              "OUTPUT, or --overwrite to start over")
        changed = [_setting_change(name, begun[name], settings[name]) for name in sorted(settings)
                   if name in begun and begun[name] != settings[name] and name != "index_version"]
        if changed:
            raise OutputError(f"{self.path} was begun with other settings ({'; '.join(changed)}; "
                              f"{self.settings_path.name}): rerun with those, or --overwrite to start over")
        return begun, {**begun, **settings, **self._check_input(begun.get("input"))}

    def _keep_settings(self, begun: dict, kept: dict, now: int | None) -> None:
        """Write the job file if it changes; with it the index generation OUTPUT's first rows were ranked at: ``now``
        while OUTPUT holds no row, None (unknown) for rows of a job file from before it was kept. ``index_then`` is
        that generation when it is not ``now``."""
        if now is not None:
            first = now if not (self.done_keys or self.done_lines) else begun.get("index_version")
            kept["index_version"] = first
            if first is not None and first != now:
                self.index_then = first
        if kept != begun:
            self._write_settings(kept)

    def _check_input(self, then: dict | None) -> dict:
        """``{"input": the INPUT's size and sha256 now}`` ({} without an INPUT), read once; OutputError for an INPUT
        whose first bytes differ from ``then``'s, the INPUT's when the job last began, or whose last line then has
        grown since (rows appended after it are new rows). A job file from before the INPUT was kept says nothing."""
        if self.input_path is None:
            return {}
        size = then["bytes"] if isinstance(then, dict) and isinstance(then.get("bytes"), int) else None
        now, first, grown = _read_input(self.input_path, size)
        if size is None:
            return {"input": now}
        if first != then:
            why = f"its first {size} bytes are not those its rows were made from"
        elif grown:
            why = f"the line its first {size} bytes ended in, without a newline, has grown since"
        else:
            return {"input": now}
        raise OutputError(f"{self.input_path} is not the INPUT {self.path} was begun with: {why} "
                          f"({self.settings_path.name}), so an id answered then may stand for another row now; rerun "
                          "with that INPUT (rows appended to its end are resumed), or --overwrite to start over")

    def _scan(self) -> None:
        end = 0  # bytes of complete lines; what follows the last newline is a torn write
        with open(self.path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    break
                try:
                    row = json.loads(line)
                    if "results" not in row and "error" not in row:  # an input file, say (arguments swapped)
                        raise ValueError("neither results nor error")
                    key = json.dumps(row["id"]) if row["id"] is not None else None
                except (ValueError, KeyError, TypeError) as e:
                    raise OutputError(f"{self.path}:{n}: not a row this job wrote ({e}); "
                                      "give another OUTPUT, or --overwrite to start over") from e
                if key is None:
                    self.done_lines.add(int(row.get("line", 0)))
                else:
                    self.done_keys[key] += 1
                end += len(line)
        size = self.path.stat().st_size
        if end < size:  # only now that the file is known to be ours (its job file read: _check_settings)
            self.torn_bytes = size - end
            with open(self.path, "rb+") as f:
                f.truncate(end)
                os.fsync(f.fileno())

    def is_done(self, key: str | None, occurrence: int, line: int) -> bool:
        """Whether the ``occurrence``-th (0-based) input row with this id, or the id-less row at ``line``, is in OUTPUT.

        Counting occurrences keeps a repeated id's error row in place across a resume."""
        return self.done_keys[key] > occurrence if key is not None else line in self.done_lines

    def append(self, lines: list[bytes]) -> None:
        """Complete lines, each ending in a newline (``rows.dumps``)."""
        if not lines:
            return
        self._file.write(b"".join(lines))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _setting_change(name: str, then, now) -> str:
    """A setting that differs, said as the user gave it (the flag, the model, the store), not as OUTPUT.job.json
    names it (``with_text False then, True now`` left the user to find the flag)."""
    if name == "top_k":
        return f"-k {then} then, -k {now} now"
    if name == "with_text":
        return f"{'texts' if then else '--no-text'} then, {'texts' if now else '--no-text'} now"
    if name == "model_version":
        return f"the model {then!r} then, {now!r} now"
    if name == "store_id":
        return f"the store {then!r} then, {now!r} now (its store_id: `nextpara info`)"
    return f"{name} {then!r} then, {now!r} now"


def _read_input(path: str | Path, at: int | None = None) -> tuple[dict, dict | None, bool]:
    """In one pass over INPUT: its size and sha256; with ``at``, those of its first ``at`` bytes (fewer when it is
    shorter: they differ), and whether they end inside a line that has grown since (a row being written then, or a
    last line without its newline that more was appended to: their last byte and the next are no line end)."""
    digest, first, grown = hashlib.sha256(), None, False
    try:
        with open(path, "rb") as f:
            if at is not None:
                _hash(f, digest, at)
                first = {"bytes": f.tell(), "sha256": digest.hexdigest()}
                if at and f.tell() == at:
                    f.seek(at - 1)
                    last, following = f.read(1), f.read(1)
                    digest.update(following)
                    grown = bool(following) and last not in b"\r\n" and following not in b"\r\n"
            _hash(f, digest)
            return {"bytes": f.tell(), "sha256": digest.hexdigest()}, first, grown
    except OSError:  # (the job says what is wrong with INPUT when it reads it)
        return {}, first, grown


def _hash(f, digest, limit: int | None = None) -> None:
    """Feed ``digest`` from ``f``'s place on: to its end, or ``limit`` bytes."""
    while limit is None or limit > 0:
        chunk = f.read(1 << 20 if limit is None else min(1 << 20, limit))
        if not chunk:
            return
        digest.update(chunk)
        if limit is not None:
            limit -= len(chunk)
