"""Online backup: ``nextpara backup`` and the Backup RPC copy a store while a real ``nextpara serve`` goes on writing
it; every copy opens, passes the store checks of the fault-injection bench, and holds every write acknowledged before
its backup began. Backup is refused on a replica, with a read token, without --backup-dir and to a bad destination.
"""

import json
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import pytest
from conftest import LiveServer, run_cli, write_vector_corpus
from nextpara.client import Client, DeadlineExceeded, PermissionDenied, ServiceError
from nextpara.store.store import open_store

from bench.reliability.store_checks import check_store, server

DIM = 32
PACE = 1000  # documents the writer acknowledges between two backups


def vector_store(root, n_docs: int = 20):
    """A store of precomputed vectors (no model: writes need no embedding, so the writer runs at full speed)."""
    write_vector_corpus(root / "seed.jsonl", n_docs, 4, DIM, seed=1, prefix="seed")
    r = run_cli("build", "--corpus", str(root / "seed.jsonl"), "--data-dir", str(root / "store"),
                "--embedder", f"precomputed:rand{DIM}")
    assert r.returncode == 0, r.stderr
    return root / "store"


@pytest.mark.slow
def test_backups_taken_during_30_s_of_writes_hold_every_acknowledged_write(tmp_path):
    data = vector_store(tmp_path)
    docs = write_vector_corpus(tmp_path / "more.jsonl", 30_000, 4, DIM, seed=2, prefix="w")
    backups = tmp_path / "backups"
    acked: list[str] = []  # in the order acknowledged
    lock, stop = threading.Condition(), threading.Event()
    errors: list[BaseException] = []

    # snapshots every 0.2 s: the snapshot a backup opens is replaced (and deleted) under it again and again
    with server(data, "--snapshot-seconds", "0.2", "--backup-dir", str(backups)) as serve:
        def writer():
            try:
                with Client(serve.address, timeout=60) as c:
                    for s in range(0, len(docs), 10):
                        if stop.is_set():
                            return
                        c.add_documents(docs[s:s + 10])
                        with lock:
                            acked.extend(d["doc_id"] for d in docs[s:s + 10])
                            lock.notify_all()
            except BaseException as e:  # surfaced below
                errors.append(e)
            finally:
                with lock:
                    lock.notify_all()

        thread = threading.Thread(target=writer)
        thread.start()
        taken = []  # (path, documents acknowledged before it began, how it was taken)
        started = time.monotonic()
        with Client(serve.address, timeout=60) as admin:
            while time.monotonic() - started < 30 and not errors:
                with lock:  # one backup per PACE documents written (each is checked below, which takes time)
                    assert lock.wait_for(lambda: len(acked) >= PACE * len(taken) or errors or not thread.is_alive(),
                                         timeout=30), "the writer acknowledged nothing for 30 s"
                    before = set(acked)
                if len(taken) % 2 == 0:
                    result = admin.backup(f"rpc-{len(taken)}")
                    assert result.index_version > 0 and result.path == str(backups / f"rpc-{len(taken)}")
                    taken.append((backups / f"rpc-{len(taken)}", before, "rpc"))
                else:
                    dest = tmp_path / f"cli-{len(taken)}"
                    r = run_cli("-q", "backup", "--data-dir", str(data), str(dest), "--json")
                    assert r.returncode == 0, r.stderr
                    assert json.loads(r.stdout)["path"] == str(dest)
                    taken.append((dest, before, "cli"))
        stop.set()
        thread.join(timeout=120)
        assert not errors, errors
        with Client(serve.address, timeout=60) as c:
            final = c.info().documents

    assert len(taken) >= 4 and {how for _, _, how in taken} == {"rpc", "cli"}
    assert len(acked) > len(taken[0][1]) + 100, "the writer did not write during the backups"
    counts = []
    for i, (path, before, how) in enumerate(taken):
        last_of_kind = all(other != how for _, _, other in taken[i + 1:])  # a server started on these two too
        outcome = check_store(path, before, serve=last_of_kind)
        assert outcome["loadable"] and not outcome["partial"] and not outcome["lost"], (how, path, outcome)
        assert outcome["index_agrees"] and outcome["words_agree"], (how, path, outcome)
        assert outcome["getinfo_agrees"] in ((True,) if last_of_kind else (None,)), (how, path, outcome)
        counts.append(outcome["documents"])
    assert counts == sorted(counts) and counts[-1] <= final  # each copy is a state of the store, none ahead of it


def test_backup_refusals_and_a_copy_that_serves(tmp_path):
    data = vector_store(tmp_path)
    backups = tmp_path / "backups"
    writer = LiveServer(data, read_tokens="reader", write_tokens="admin", backup_dir=str(backups)).start()
    replica = LiveServer(data, read_only=True, backup_dir=str(backups)).start()
    try:
        with Client(writer.address, token="reader", timeout=30) as c:
            with pytest.raises(PermissionDenied) as err:
                c.backup("by-a-reader")
            assert err.value.reason == "WRITE_ROLE_REQUIRED" and err.value.metadata["method"] == "Backup"
        with Client(replica.address, timeout=30) as c:
            with pytest.raises(ServiceError) as err:
                c.backup("from-a-replica")
            assert (err.value.reason, err.value.code) == ("READ_ONLY_REPLICA", grpc.StatusCode.FAILED_PRECONDITION)
        assert not backups.exists()
        with Client(writer.address, token="admin", timeout=30) as c:
            c.add_documents([{"doc_id": "late", "paragraphs": ["Written before the backup."], "vectors": [[0.5] * DIM]}])
            first = c.backup("nightly/first")
            assert first.path == str(backups / "nightly" / "first") and first.documents == 21
            assert first.index_version == c.info().index_version and first.snapshot_generation >= 0
            copied = [p for p in backups.rglob("*") if p.is_file()]  # the database, the manifest, the snapshot's files
            assert first.files == len(copied) >= 4 and first.size_bytes == sum(p.stat().st_size for p in copied)
            for bad in ("nightly/first", "../outside", "/etc/absolute", ".", "   ", "nightly/ ", " /second"):
                with pytest.raises(ServiceError) as err:
                    c.backup(bad)
                assert err.value.reason == "INVALID_DESTINATION" and err.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert sorted(p.name for p in backups.iterdir()) == ["nightly"]  # no directory named with spaces
            assert [p.name for p in (backups / "nightly").iterdir()] == ["first"]
            named, again = c.backup(), c.backup()  # names of the server's choosing: one each, even within a second
            assert named.path.startswith(str(backups / f"nextpara-g{first.index_version}-"))
            assert again.path.startswith(str(backups / f"nextpara-g{first.index_version}-")) and again.path != named.path
    finally:
        replica.stop()
        writer.stop()
    assert Path(first.path).stat().st_mode == data.stat().st_mode  # the store's mode, not a private 0700
    from nextpara.errors import InvalidInputError
    from nextpara.store.backup import backup

    (tmp_path / "a-file").write_text("")
    for dest, said in (("", "backup destination is empty"),  # it was the current directory, which exists
                       (str(tmp_path / "a-file" / "copy"), "cannot create the backup destination")):  # a traceback-ish
        with pytest.raises(InvalidInputError, match=said):  # message naming a work directory before
            backup(data, dest)
    with open_store(first.path, readonly=True) as copy:
        assert (copy.count_documents(), copy.index_generation) == (21, first.index_version)
        assert copy.missing_documents(["late", "seed-00000"]) == []
    copy_server = LiveServer(first.path).start()  # serving a copy is all a restore takes
    try:
        with Client(copy_server.address, timeout=30) as c:
            info = c.info()
            assert (info.documents, info.index_version) == (21, first.index_version)
            assert c.get_document("late").paragraphs[0].text == "Written before the backup."
    finally:
        copy_server.stop()


def test_a_backup_whose_caller_went_away_finishes_before_the_next_one_to_its_destination_starts(tmp_path):
    data = vector_store(tmp_path)
    db = sqlite3.connect(data / "paragraphs.sqlite")  # 100 MiB more in its database: a copy that takes a while
    with db:
        db.execute("CREATE TABLE padding (b BLOB)")
        db.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) "
                   "INSERT INTO padding SELECT zeroblob(1048576) FROM n")
    db.close()
    backups = tmp_path / "backups"
    writer = LiveServer(data, backup_dir=str(backups)).start()
    try:
        with Client(writer.address, timeout=60) as c:
            c.add_documents([{"doc_id": "late", "paragraphs": ["Written before the backup."], "vectors": [[0.5] * DIM]}])
            acked = {f"seed-{i:05d}" for i in range(20)} | {"late"}
            for attempt in range(6):  # a deadline that passes while the copy is under way (its work directory is there)
                name = f"first-{attempt}"
                try:
                    c.backup(name, timeout=0.1 * 2 ** attempt)
                except DeadlineExceeded:
                    if list(backups.glob(f".{name}.partial-*")):
                        break
            else:
                pytest.fail("no Backup's deadline passed while its copy was under way")
            with pytest.raises(ServiceError) as err:  # at once, to the same destination: it waits for the first copy
                c.backup(name, timeout=120)           # to finish, and then finds it there
            assert err.value.reason == "INVALID_DESTINATION" and err.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert c.backup(f"{name}-after", timeout=120).documents == 21  # the server backs up as before
    finally:
        writer.stop()
    assert [p.name for p in backups.iterdir() if p.name.startswith(f".{name}.")] == []  # no work directory left
    outcome = check_store(backups / name, acked, serve=False)  # the one directory there is one whole copy
    assert outcome["loadable"] and not outcome["partial"] and not outcome["lost"], outcome
    assert outcome["index_agrees"] and outcome["words_agree"] and outcome["documents"] == 21, outcome


def test_the_cli_copies_the_model_of_a_trained_store(server_store, tmp_path):
    r = run_cli("backup", "--data-dir", str(server_store), str(tmp_path / "copy"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"backed up to {tmp_path / 'copy'}: generation ") and " MiB in " in r.stdout
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == (server_store / "model.safetensors").read_bytes()
    with open_store(tmp_path / "copy", readonly=True) as copy, open_store(server_store, readonly=True) as store:
        assert (copy.count_paragraphs(), copy.generation) == (store.count_paragraphs(), store.generation)
    again = run_cli("backup", "--data-dir", str(server_store), str(tmp_path / "copy"))
    assert again.returncode == 2 and "exists" in again.stderr
