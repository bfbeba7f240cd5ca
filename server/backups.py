"""The Backup RPC: a copy of the store into ``--backup-dir`` while serving and writing go on (store/backup.py).

One backup at a time. A caller that goes away (its deadline passed) cannot stop the copy, so the next Backup waits
until it has really finished (it may be to the same destination, which it then finds there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from nextpara.errors import FailedPreconditionError, InvalidInputError, Reason
from nextpara.store.backup import BackupReport, backup

log = logging.getLogger(__name__)


class Backups:
    def __init__(self, data_dir: Path, backup_dir: str | None):
        self.data_dir, self.backup_dir = data_dir, backup_dir
        self._lock = asyncio.Lock()

    async def take(self, destination: str, generation: Callable[[], int]) -> BackupReport:
        """Copy the store to ``destination`` (relative, inside --backup-dir; "" picks a name) on a thread of its own:
        the workers keep serving. ``generation`` reads the index generation as the copy starts (after any backup it
        waited for), for the log line and a name picked here."""
        name = backup_name(destination, generation())  # a bad destination is refused before any wait
        if not self.backup_dir:
            raise FailedPreconditionError("this server was started without --backup-dir, so it writes no backups: "
                                          "restart it with --backup-dir DIR, or run `nextpara backup` on its machine")
        root = Path(self.backup_dir).expanduser().resolve()
        if self._lock.locked():
            log.info("backup to %s: waits for the backup in progress", root / name)
        async with self._lock:
            started = generation()
            # a name of the server's choosing: of the generation the copy starts at, and never one taken already
            dest = root / name if destination else unused(root / backup_name("", started))
            log.info("backup of %s to %s: started at index generation %d", self.data_dir, dest, started)
            copy = asyncio.get_running_loop().run_in_executor(None, backup, self.data_dir, dest)
            try:
                report = await asyncio.shield(copy)
            except InvalidInputError as e:  # the store's refusal (it exists, it cannot be made): of this field too
                if e.reason == Reason.INVALID_DESTINATION:  # (a name the server chose is not the caller's field)
                    e.field = "destination" if destination else e.field
                    e.metadata = {**e.metadata, "destination": destination, "path": str(dest)}
                raise
            except asyncio.CancelledError:
                await asyncio.wait([copy])  # the lock is held until the copy thread has finished
                if copy.exception() is not None:
                    log.error("backup to %s, whose caller went away, failed: %s", dest, copy.exception())
                else:
                    log.info("backup whose caller went away: %s", copy.result().line())
                raise
        log.info("%s", report.line())
        return report


def unused(dest: Path) -> Path:
    """``dest``, or if it exists ``dest-2``, ``dest-3``, ... the first that does not."""
    n, path = 1, dest
    while path.exists() or path.is_symlink():
        n += 1
        path = dest.with_name(f"{dest.name}-{n}")
    return path


def backup_name(name: str, generation: int) -> PurePosixPath:
    """A Backup's destination as a path inside --backup-dir; "" picks nextpara-g<generation>-<UTC time, to the
    millisecond> (made unique under the backup lock if taken: :func:`unused`). A path that would leave it, or that
    is blank or has a blank part ("   ", "nightly/ "), is INVALID_DESTINATION (one that exists too, refused by the
    store's backup)."""
    if not name:
        now = time.time()
        name = f"nextpara-g{generation}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}Z"
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\x00" in name or not path.parts:
        raise InvalidInputError(f"destination {name!r:.200} is not a relative path inside the backup directory",
                                reason=Reason.INVALID_DESTINATION, field="destination", metadata={"destination": name})
    if any(not part.strip() for part in path.parts):  # "   " names nothing, as `nextpara backup`'s destination says
        raise InvalidInputError(f"destination {name!r:.200} is blank or has a blank directory name in it: name each "
                                "directory", reason=Reason.INVALID_DESTINATION, field="destination",
                                metadata={"destination": name})
    return path
