"""Online backup: copy a store into a new directory while its writer goes on serving and writing.

The copy is made without the write lock, in this order, so that it is consistent whatever the writer does meanwhile:

1. **The snapshot and the other files.** The manifest is read and the files of the snapshot it names are opened; if
   the manifest has changed by then (a writer deletes an old snapshot only after its manifest names the new one), it
   is done again. Snapshots and the other top-level files (the model, the training report) are never written in
   place, only replaced by rename, so an open file stays the whole version it was when opened, even once deleted.
2. **The database**, through SQLite's online backup API, page by page under one read transaction of its own: one
   consistent state of the database, later than the snapshot (a snapshot is written after the writes it holds are
   committed). In WAL mode that read does not stop the writer. Every write acknowledged before the backup began is
   committed before this read starts, so the copy holds it.
3. The files opened in step 1 are copied, the manifest read in step 1 is written last, everything is fsynced, and the
   directory, built in a work directory of its own beside the destination (``.<name>.partial-<random>``: two backups
   never share one), is renamed into place, refused if something appeared at the destination meanwhile: a
   destination that exists is complete, and is the work of one backup.

The copy is a data directory like any other: opening it loads the snapshot and replays what its database holds beyond
it (vector_table.py), exactly as a restart does. Its manifest names the snapshot it came with.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nextpara.errors import InvalidInputError, Reason, StorageFullError
from nextpara.progress import progress_bar

from .data_dir import DB_FILE, LOCK_FILE, MANIFEST, MODEL_LOCK, DataDir, disk_full
from .snapshot import fsync_dir, write_bytes_durably

log = logging.getLogger(__name__)
PAGES_PER_STEP = 1024  # database pages copied per step of the backup API (progress is reported between steps)
CHUNK = 8 * 2**20  # bytes per read when copying files
NOT_COPIED = {DB_FILE, DB_FILE + "-wal", DB_FILE + "-shm", DB_FILE + "-journal", LOCK_FILE, MODEL_LOCK, MANIFEST}


@dataclass
class BackupReport:
    path: str  # the copy's directory
    generation: int  # the write generation its database holds
    snapshot_generation: int  # the generation of the snapshot copied with it; -1 if the store had none
    documents: int
    paragraphs: int
    size_bytes: int  # the copy's files
    files: int
    seconds: float

    def line(self) -> str:
        snapshot = f"snapshot g{self.snapshot_generation}" if self.snapshot_generation >= 0 else "no snapshot"
        return (f"backed up to {self.path}: generation {self.generation} ({self.documents} documents, {self.paragraphs} "
                f"paragraphs; {snapshot}), {self.files} files, {self.size_bytes / 2**20:.1f} MiB in {self.seconds:.1f}s")


def check_destination(data_dir: DataDir, dest: str | os.PathLike) -> Path:
    """``dest`` resolved, refused (INVALID_DESTINATION) if it is empty, exists or lies inside the store it would copy."""
    if not str(dest).strip():  # Path("") is the current directory
        raise InvalidInputError("backup destination is empty: name a new directory", reason=Reason.INVALID_DESTINATION,
                                metadata={"destination": str(dest)})
    dest = Path(dest).expanduser().resolve()
    if dest.exists() or dest.is_symlink():
        raise InvalidInputError(f"backup destination {dest} exists: name a new directory", reason=Reason.INVALID_DESTINATION,
                                metadata={"destination": str(dest)})
    if dest == data_dir.path or data_dir.path in dest.parents:
        raise InvalidInputError(f"backup destination {dest} is inside the store it copies ({data_dir.path})",
                                reason=Reason.INVALID_DESTINATION, metadata={"destination": str(dest)})
    return dest


def backup(data_dir: str | os.PathLike | DataDir | None, dest: str | os.PathLike, *, quiet: bool = True) -> BackupReport:
    """Copy the store in ``data_dir`` (None: the default) to the new directory ``dest`` (see the module's docstring);
    works while another process, or this one, writes the store. A full disk raises StorageFullError and leaves nothing
    at ``dest``."""
    t0 = time.perf_counter()
    data_dir = DataDir(DataDir.resolve(data_dir))  # its own view: the manifest is read by this backup
    if not data_dir.has_store:
        raise data_dir.no_store_error()
    dest = check_destination(data_dir, dest)
    try:
        _make_parents(dest.parent)
        work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.partial-"))
    except OSError as e:
        if disk_full(e, dest.parent):
            raise StorageFullError(f"no space left to create the backup {dest} ({e}); the store is unchanged") from e
        raise InvalidInputError(f"cannot create the backup destination {dest}: {e.strerror or e}",
                                reason=Reason.INVALID_DESTINATION, metadata={"destination": str(dest)}) from e
    opened: dict[str, object] = {}
    try:
        manifest, opened = _open_files(data_dir)
        generation, documents, paragraphs = _copy_database(data_dir, work / DB_FILE, quiet)
        _copy_files(opened, work, quiet)
        if manifest is not None:
            write_bytes_durably(work / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        for folder in sorted({(work / name).parent for name in opened} | {work}, key=lambda p: -len(p.parts)):
            fsync_dir(folder)
        # the store's mode, not mkdtemp's 0700 (a backup restored in the store's place is readable by whom the store
        # was), set once the copy is in: a read-only store's mode would have refused the copying
        os.chmod(work, stat.S_IMODE(data_dir.path.stat().st_mode))
        _rename_no_replace(work, dest)
        fsync_dir(dest.parent)
    except BaseException as e:
        shutil.rmtree(work, ignore_errors=True)
        if disk_full(e, dest.parent):
            raise StorageFullError(f"no space left while writing the backup {dest} ({e}): nothing was kept there; "
                                   "the store is unchanged") from e
        raise
    finally:
        for f in opened.values():
            f.close()
    files = [p for p in dest.rglob("*") if p.is_file()]
    report = BackupReport(str(dest), generation, int(manifest["generation"]) if manifest and manifest.get("snapshot") else -1,
                          documents, paragraphs, sum(p.stat().st_size for p in files), len(files),
                          round(time.perf_counter() - t0, 3))
    return report


def _make_parents(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each durably (its entry in its parent fsynced)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # another backup made it meanwhile
            pass
        fsync_dir(folder.parent)


_RENAME_NOREPLACE = 1  # renameat2's flag: fail with EEXIST rather than replace the target
_AT_FDCWD = -100


def _rename_no_replace(work: Path, dest: Path) -> None:
    """Rename ``work`` to ``dest`` unless ``dest`` exists (INVALID_DESTINATION): one step with Linux's renameat2, so
    that nothing that appeared at ``dest`` since the backup checked it (another backup's copy, an empty directory,
    which a plain rename would replace) is replaced. Where renameat2 is missing, a check just before the rename."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(work), _AT_FDCWD, os.fsencode(dest), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise _appeared(dest)
        if err not in (errno.EINVAL, errno.ENOSYS):  # EINVAL/ENOSYS: the file system or kernel lacks the flag
            raise OSError(err, os.strerror(err), str(dest))
    if dest.exists() or dest.is_symlink():
        raise _appeared(dest)
    os.rename(work, dest)


def _appeared(dest: Path) -> InvalidInputError:
    return InvalidInputError(f"backup destination {dest} appeared while the backup was being made: name a new directory",
                             reason=Reason.INVALID_DESTINATION, metadata={"destination": str(dest)})


def _open_files(data_dir: DataDir, attempts: int = 20) -> tuple[dict | None, dict[str, object]]:
    """The manifest and open files: its snapshot's (under their relative names) and the other top-level files. The
    snapshot's files are those its directory holds (index.faiss is absent for a flat index); the writer deletes an
    old snapshot only after its manifest names the new one, so a manifest that still names the same snapshot once
    its files are open means they were all there: otherwise it is read again."""
    for _ in range(attempts):
        manifest = _read_manifest(data_dir)
        opened: dict[str, object] = {}
        try:
            if manifest and manifest.get("snapshot"):
                folder = data_dir / manifest["snapshot"]
                for name in sorted(os.listdir(folder)):
                    opened[f"{manifest['snapshot']}/{name}"] = open(folder / name, "rb")
            if manifest == _read_manifest(data_dir):
                break
        except FileNotFoundError:  # the writer replaced the snapshot meanwhile: its manifest names the new one
            pass
        for f in opened.values():
            f.close()
    else:
        raise RuntimeError(f"the snapshot of {data_dir} changed {attempts} times while it was being opened")
    for entry in sorted(data_dir.path.iterdir()):
        if entry.name in NOT_COPIED or entry.name.endswith(".tmp") or entry.name.startswith("."):
            continue
        try:
            if entry.is_file():
                opened[entry.name] = open(entry, "rb")
        except FileNotFoundError:  # deleted meanwhile: not part of the store any more
            pass
    return manifest, opened


def _read_manifest(data_dir: DataDir) -> dict | None:
    path = data_dir / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _copy_database(data_dir: DataDir, target: Path, quiet: bool) -> tuple[int, int, int]:
    """SQLite's online backup of the store's database into ``target``, from one read transaction; (generation,
    documents, paragraphs) of the copy."""
    source = data_dir.connect(readonly=True)
    copy = sqlite3.connect(target, isolation_level=None)
    try:
        source.execute("BEGIN")  # one state of the database for every step of the backup (and the counts)
        generation = int(source.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        documents = int(source.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
        paragraphs = int(source.execute("SELECT COUNT(*) FROM paragraphs").fetchone()[0])
        with progress_bar(desc="backup database", unit="page", quiet=quiet) as bar:
            def step(status, remaining, total):
                bar.total = total
                bar.update(total - remaining - bar.n)

            source.backup(copy, pages=PAGES_PER_STEP, progress=step, sleep=0.01)
        source.execute("COMMIT")
        copy.execute("PRAGMA synchronous=FULL")
        copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        source.close()
        copy.close()  # the last connection: its WAL is checkpointed into the file and removed
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
    log.info("backup: database copied at generation %d (%d documents, %d paragraphs)", generation, documents, paragraphs)
    return generation, documents, paragraphs


def _copy_files(opened: dict[str, object], work: Path, quiet: bool) -> None:
    total = sum(os.fstat(f.fileno()).st_size for f in opened.values())
    with progress_bar(total=total, desc="backup files", unit="B", quiet=quiet) as bar:
        for name, source in opened.items():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                while chunk := source.read(CHUNK):
                    out.write(chunk)
                    bar.update(len(chunk))
                out.flush()
                os.fsync(out.fileno())
    log.info("backup: %d files copied (%.1f MiB)", len(opened), total / 2**20)
