"""Crash safety, counted: ingestion runs killed with SIGKILL at random moments, then checked.

    python -m bench.reliability.fault_injection                     # 10 build kills + 10 AddDocuments kills
    python -m bench.reliability.fault_injection --runs 6 --seed 7   # (tests/test_crash.py runs this shorter setting)

Two kinds of run, alternating, each on a fresh data directory:

* ``build``: ``nextpara build`` of a 1,500-document corpus with precomputed 64-d vectors, killed
  a random time after its n-th acknowledged batch (the build logs "stored N documents through
  'doc-X'" after each committed batch; n random, sometimes 0 or the last, so kills also land
  before the first write and during the final snapshot);
* ``rpc``: ``nextpara serve`` (snapshots every 0.2 s, so kills land inside snapshot writes too)
  while a client sends AddDocuments calls of 20 documents back to back; the server is killed a
  random 0.3-3 s in. A document counts as acknowledged when its call returned OK.

After each kill the data directory is checked: it opens as a writable store (the dead writer's
lock must not block it); every document has all its paragraphs (none partial); the FAISS index
holds exactly SQLite's paragraph ids; every acknowledged document is present; a fresh
``nextpara serve`` on it answers GetInfo with SQLite's counts; a sample of stored vectors finds
itself.

Then a full disk: each build runs in its own mount namespace on a 16 MB tmpfs that already holds
a ballast file of 14, 11, 8 or 7 MB, so the disk fills while documents are being added or while
the index snapshot is written. Each must fail with a one-line "no space left" error (no
traceback), leave a store that passes the same checks, and, once the ballast is deleted, a
rerun must complete the build. (Needs root for the private mount; otherwise skipped, and the
results say so.) Prints tables, writes bench/results/fault_injection.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.record import BENCH, argument_parser, save, stamp
from bench.reliability.store_checks import check_store, nextpara, server, write_vector_corpus

N_DOCS, N_PAR, DIM, BATCH_PARAGRAPHS = 1500, 20, 64, 300
ACK = re.compile(r"stored \d+ documents through '(doc-\d+)'")


def build_run(corpus: Path, data: Path, rng: random.Random) -> tuple[dict, set[str]]:
    n_batches = N_DOCS * N_PAR // BATCH_PARAGRAPHS
    n_acks = rng.choice([0, n_batches] + list(range(1, n_batches)))
    jitter = rng.uniform(0.3, 1.0) if n_acks == 0 else rng.uniform(0, 0.05)
    proc = nextpara("build", "--corpus", str(corpus), "--data-dir", str(data), "--embedder", "precomputed:rand64",
                    "--batch-paragraphs", str(BATCH_PARAGRAPHS))
    acks = []
    if n_acks:
        for line in proc.stderr:
            if m := ACK.search(line):
                acks.append(m.group(1))
                if len(acks) == n_acks:
                    break
    time.sleep(jitter)
    proc.send_signal(signal.SIGKILL)
    _, rest = proc.communicate(timeout=60)
    acks += ACK.findall(rest)
    last = int(acks[-1].split("-")[1]) if acks else -1  # a build commits documents in corpus order
    return {"kill_after_acks": n_acks, "jitter_s": round(jitter, 3)}, {f"doc-{d:05d}" for d in range(last + 1)}


def rpc_run(base: Path, data: Path, rng: random.Random, run: int) -> tuple[dict, set[str]]:
    from nextpara.client import Client

    shutil.copytree(base, data, ignore=shutil.ignore_patterns("write.lock"))
    serve = server(data, "--snapshot-seconds", "0.2").start()
    docs = write_vector_corpus(data.parent / f"rpc{run}.jsonl", 12000, 5, DIM, seed=run, prefix=f"rpc{run}")
    acked: set[str] = set()
    stop = threading.Event()

    def writer():
        with Client(serve.address, timeout=30) as c:
            for s in range(0, len(docs), 20):
                if stop.is_set():
                    return
                try:
                    c.add_documents(docs[s:s + 20])
                except Exception:  # the server died under the call: not acknowledged
                    return
                acked.update(d["doc_id"] for d in docs[s:s + 20])

    thread = threading.Thread(target=writer)
    thread.start()
    delay = rng.uniform(0.3, 3.0)
    time.sleep(delay)
    serve.kill()
    stop.set()
    thread.join(timeout=60)
    return {"kill_after_s": round(delay, 2), "offered": len(docs)}, set(acked)


def run(runs: int, work: Path, seed: int = 0, quiet: bool = False) -> list[dict]:
    """``runs`` kills alternating between build and rpc; one result dict per run."""
    rng = random.Random(seed)
    corpus = work / "corpus.jsonl"
    write_vector_corpus(corpus, N_DOCS, N_PAR, DIM, seed=5)
    base = work / "base"
    seed_corpus = work / "seed.jsonl"
    write_vector_corpus(seed_corpus, 20, 5, DIM, seed=99, prefix="seed")
    subprocess.run([sys.executable, "-m", "nextpara", "build", "--corpus", str(seed_corpus), "--data-dir", str(base),
                    "--embedder", "precomputed:rand64"], check=True, capture_output=True)
    results = []
    for i in range(runs):
        kind = "build" if i % 2 == 0 else "rpc"
        data = work / f"{kind}{i}"
        plan, acked = build_run(corpus, data, rng) if kind == "build" else rpc_run(base, data, rng, i)
        t0 = time.perf_counter()
        outcome = check_store(data, acked)
        row = {"run": i, "kind": kind, **plan, "acknowledged": len(acked), **outcome,
               "check_seconds": round(time.perf_counter() - t0, 1)}
        row["ok"] = (row["loadable"] and row["index_agrees"] and row["words_agree"] and row["getinfo_agrees"] and not row["partial"]
                     and not row["lost"])
        results.append(row)
        if not quiet:
            print(json.dumps(row), flush=True)
        shutil.rmtree(data, ignore_errors=True)
    return results


BALLAST_MB = (14, 11, 8, 7)  # of a 16 MB file system: the 300-document build needs about 10 MB


def can_mount_tmpfs() -> str | None:
    """None if this process may mount a private tmpfs (root with unshare), else why not."""
    if not shutil.which("unshare"):
        return "unshare is not installed"
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"cannot mount a private tmpfs here: {r.stderr.strip()}"


def in_private_tmpfs(mnt: Path, size_mb: int, setup: str, child_args: str) -> dict:
    """Run this script with ``child_args`` in a new mount namespace where ``mnt`` is a tmpfs of
    ``size_mb`` (after the shell commands ``setup``); return the JSON line it prints last."""
    script = (f"mount -t tmpfs -o size={size_mb}m tmpfs {mnt} && {setup}"
              f"{sys.executable} -m bench.reliability.fault_injection {child_args}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                       cwd=BENCH.parent)  # where ``bench`` is importable
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"{child_args} failed:\n{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def full_disk_runs(work: Path, quiet: bool = False) -> list[dict]:
    """A build into a 16 MB tmpfs already holding a ballast file, for each ballast size; then the ballast
    is deleted and the build rerun. Each in its own mount namespace (see ``full_disk_child``)."""
    corpus = work / "disk-corpus.jsonl"
    write_vector_corpus(corpus, 300, 20, DIM, seed=1)
    results = []
    for ballast in BALLAST_MB:
        mnt = work / f"disk{ballast}"
        mnt.mkdir()
        results.append(in_private_tmpfs(mnt, 16, "", f"--full-disk-child {mnt} {corpus} {ballast}"))
        if not quiet:
            print(json.dumps(results[-1]), flush=True)
    return results


def full_disk_child(mnt: Path, corpus: Path, ballast_mb: int) -> None:
    """Inside the namespace: fill, build, check; free the space, build again, check; print one JSON line."""
    (mnt / "ballast").write_bytes(b"\0" * (ballast_mb * 2**20))
    data = mnt / "store"

    def build() -> tuple[subprocess.CompletedProcess, set[str]]:
        r = subprocess.run([sys.executable, "-m", "nextpara", "build", "--corpus", str(corpus), "--data-dir", str(data),
                            "--embedder", "precomputed:rand64", "--batch-paragraphs", str(BATCH_PARAGRAPHS)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        acks = ACK.findall(r.stderr)
        last = int(acks[-1].split("-")[1]) if acks else -1
        return r, {f"doc-{d:05d}" for d in range(last + 1)}

    first, acked = build()
    errors = [line for line in first.stderr.splitlines() if "error:" in line]
    out = {"ballast_mb": ballast_mb, "exit_code": first.returncode, "error": errors[-1] if errors else "",
           "traceback": "Traceback" in first.stderr, "acknowledged": len(acked), **check_store(data, acked)}
    (mnt / "ballast").unlink()
    second, _ = build()
    after = check_store(data, {f"doc-{d:05d}" for d in range(300)})
    out.update(rerun_exit_code=second.returncode, rerun_documents=after["documents"])
    out["ok"] = (out["loadable"] and out["index_agrees"] and out["words_agree"] and out["getinfo_agrees"] and not out["partial"]
                 and not out["lost"] and not out["traceback"] and (first.returncode == 0 or "no space left" in out["error"])
                 and second.returncode == 0 and after["documents"] == 300 and not after["lost"])
    print(json.dumps(out))


def full_disk_server_run(work: Path, index: str = "flat") -> dict:
    """A running server whose disk fills up under AddDocuments, in its own mount namespace (see
    ``full_disk_server_child``); returns the child's JSON line. ``index``: flat snapshots write NumPy files
    only, others an index file FAISS writes itself (its write errors are not Python's)."""
    base, seed = work / f"disk-server-base-{index}", work / "disk-server-seed.jsonl"
    write_vector_corpus(seed, 20, 5, DIM, seed=98, prefix="seed")
    subprocess.run([sys.executable, "-m", "nextpara", "build", "--corpus", str(seed), "--data-dir", str(base),
                    "--embedder", "precomputed:rand64", "--index", index], check=True, capture_output=True)
    mnt = work / f"disk-server-{index}"
    mnt.mkdir()
    return in_private_tmpfs(mnt, 8, f"cp -r {base} {mnt}/store && rm -f {mnt}/store/write.lock && ",
                            f"--full-disk-server-child {mnt}")


def full_disk_server_child(mnt: Path) -> None:
    """Inside the namespace: leave ~1.5 MB free, add documents through a server until the disk is full,
    read, free the space, add again, stop, check the store; print one JSON line."""
    from nextpara.client import Client, ResourceExhausted

    free = shutil.disk_usage(mnt).free
    (mnt / "ballast").write_bytes(b"\0" * max(0, free - 3 * 2**19))
    data = mnt / "store"
    serve = server(data, "--snapshot-seconds", "0.5").start()
    docs = write_vector_corpus(mnt.parent / "disk-server-docs.jsonl", 2000, 5, DIM, seed=97, prefix="full")
    acked: set[str] = set()
    out = {"refusal": "", "refused_code": None, "refused_reason": None}
    try:
        with Client(serve.address, timeout=60) as c:
            for s in range(0, len(docs), 20):
                try:
                    c.add_documents(docs[s:s + 20])
                except ResourceExhausted as e:
                    out.update(refusal=str(e)[:300], refused_code="RESOURCE_EXHAUSTED", refused_reason=e.reason,
                               refused_committed=e.metadata.get("committedMessages"), refused_at=s)
                    break
                except Exception as e:  # noqa: BLE001 - any other outcome is a failure to report
                    out.update(refusal=f"{type(e).__name__}: {str(e)[:300]}", refused_code=type(e).__name__, refused_at=s)
                    break
                acked.update(d["doc_id"] for d in docs[s:s + 20])
            time.sleep(1.5)  # periodic snapshots run (and fail) against the full disk meanwhile
            info = c.info()
            out["reads_while_full"] = info.documents == 20 + len(acked)
            (mnt / "ballast").unlink()
            c.add_documents(docs[-20:])
            acked.update(d["doc_id"] for d in docs[-20:])
            out["write_after_freeing"] = True
        out["server_alive"] = serve.alive
    finally:
        serve.stop()
    out.update(server_exit_code=serve.returncode, acknowledged=len(acked), **check_store(data, acked))
    out["ok"] = (out["refused_code"] == "RESOURCE_EXHAUSTED" and "no space left" in out["refusal"]
                 and out["refused_reason"] == "STORAGE_FULL" and out.get("refused_committed") is not None
                 and out["reads_while_full"] and out.get("write_after_freeing", False) and out["server_alive"]
                 and out["server_exit_code"] == 0 and out["loadable"] and out["index_agrees"] and out["words_agree"]
                 and out["getinfo_agrees"] and not out["partial"] and not out["lost"])
    print(json.dumps(out))


def markdown(record: dict) -> str:
    rows = record["runs"]
    lines = [f"# Fault injection: SIGKILL during ingestion\n\n`{record['command']}` on {record['date']}, "
             f"{record['machine']}, {record['seconds']:.0f} s.\n",
             f"**{sum(r['ok'] for r in rows)}/{len(rows)} runs intact; {sum(r['lost'] for r in rows)} acknowledged "
             f"documents lost; {sum(not r['loadable'] for r in rows)} stores unloadable; "
             f"{sum(r['partial'] for r in rows)} partial documents.**\n",
             "| run | kind | killed | acknowledged docs | docs stored | partial | lost | index = SQLite | words = SQLite | GetInfo = SQLite |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        when = (f"{r['jitter_s']} s after ack {r['kill_after_acks']}" if r["kind"] == "build"
                else f"{r['kill_after_s']} s into a stream of {r['offered']:,} documents")
        lines.append(f"| {r['run']} | {r['kind']} | {when} | {r['acknowledged']} | {r['documents']} | {r['partial']} | "
                     f"{r['lost']} | {r['index_agrees']} | {r['words_agree']} | {r['getinfo_agrees']} |")
    disk = record.get("full_disk")
    if disk:
        lines += ["", "Full disk: a 16 MB tmpfs holding a ballast file; build, check, delete the ballast, build again.", "",
                  "| ballast MB | exit code | error | docs stored | lost | index = SQLite | rerun exit | docs after rerun |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['ballast_mb']} | {r['exit_code']} | {r['error'][:110]} | {r['documents']} | {r['lost']} | "
                  f"{r['index_agrees']} | {r['rerun_exit_code']} | {r['rerun_documents']} |" for r in disk]
    server = record.get("full_disk_server")
    if server:
        lines += ["", f"Full disk under a running server (8 MB tmpfs, ~1.5 MB left, AddDocuments of 20 documents until "
                  f"refused): {server['acknowledged']} documents acknowledged; refusal {server['refused_code']}: "
                  f"{server['refusal'][:160]}; reads while full: {server['reads_while_full']}; a write after freeing "
                  f"the space: {server.get('write_after_freeing')}; store after SIGTERM: loads {server['loadable']}, "
                  f"lost {server['lost']}, index = SQLite {server['index_agrees']}; ok: {server['ok']}."]
    if "full_disk_skipped" in record:
        lines += ["", f"Full disk: not run ({record['full_disk_skipped']})."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full-disk-child", nargs=3, metavar=("MOUNT", "CORPUS", "BALLAST_MB"), help=argparse.SUPPRESS)
    parser.add_argument("--full-disk-server-child", metavar="MOUNT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.full_disk_server_child:
        full_disk_server_child(Path(args.full_disk_server_child))
        return 0
    if args.full_disk_child:
        mnt, corpus, ballast = args.full_disk_child
        full_disk_child(Path(mnt), Path(corpus), int(ballast))
        return 0

    start = time.perf_counter()
    record = stamp(__file__)
    with tempfile.TemporaryDirectory(prefix="nextpara-faults-") as work:
        record["runs"] = run(args.runs, Path(work), args.seed)
        why_not = can_mount_tmpfs()
        if why_not:
            record["full_disk_skipped"] = why_not
        else:
            record["full_disk"] = full_disk_runs(Path(work))
            record["full_disk_server"] = full_disk_server_run(Path(work))
            print(json.dumps(record["full_disk_server"]), flush=True)
    record["seconds"] = time.perf_counter() - start
    save("fault_injection", record, markdown(record))
    ok = all(r["ok"] for r in record["runs"] + record.get("full_disk", []) + [record.get("full_disk_server", {"ok": True})])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
