"""Shared fixtures: a private embedding cache, the real MiniLM embedder, corpus helpers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Each pytest-xdist worker (and every process it starts) gets its share of the cores: workers with torch's
# default of every core each would oversubscribe them, and spinning OpenMP threads on a shared core nearly
# double every test's time. Only workers set it (the controller runs no tests, and the workers start from its
# environment), before torch or NumPy load, so they and their children read it; a value the caller set is kept.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0))
                                                    // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the bench package: tests run some bench scripts at shorter settings
from bench.reliability.store_checks import write_vector_corpus  # noqa: E402,F401  (one corpus writer for tests and bench)

CORPORA = REPO.parent / "shared" / "corpora"
PEPS = CORPORA / "peps.jsonl"
# The files that take longest (minutes each on 2 cores, `pytest --durations=0` summed by file), run first, longest
# first: `make test` hands whole files to two workers in collection order (--dist loadfile --no-loadscope-reorder),
# and one of these handed out last would leave the other worker idle while it runs
LONGEST_FIRST = ("test_crash.py", "test_batch.py", "test_readme.py", "test_cli.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the other files keep their order


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests never touch the user's embedding cache or default data dir."""
    root = tmp_path_factory.mktemp("home")
    old = {k: os.environ.get(k) for k in ("NEXTPARA_CACHE_DIR", "NEXTPARA_DATA_DIR")}
    os.environ["NEXTPARA_CACHE_DIR"] = str(root / "cache")
    os.environ["NEXTPARA_DATA_DIR"] = str(root / "data")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def minilm():
    from nextpara.store.embedders import make_embedder

    return make_embedder("minilm")


@pytest.fixture
def peps_path() -> Path:
    if not PEPS.exists():
        pytest.skip(f"{PEPS} is absent: the shared corpora are only on the project's machines")
    return PEPS


def peps_slice(path, paragraphs: dict[str, int]) -> list[str]:
    """The corpus's first lines, each document kept while its split holds fewer than ``paragraphs[split]``
    paragraphs (a split not named gets none): a small corpus whose splits are as large as asked (training holds
    out its validation split, eval has test queries)."""
    from nextpara.attention_core.sequences import SPLITS, split_of

    have, lines = {split: 0 for split in SPLITS}, []
    with open(path) as src:
        for line in src:
            row = json.loads(line)
            split = split_of(row["doc_id"])
            if have[split] < paragraphs.get(split, 0):
                have[split] += len(row["paragraphs"])
                lines.append(line)
            if all(have[s] >= n for s, n in paragraphs.items()):
                return lines
    raise AssertionError(f"{path} has too few paragraphs for {paragraphs}: {have}")


def unit_vectors(n: int, dim: int, seed: int = 0, clusters: int = 0) -> np.ndarray:
    """Seeded unit vectors; with ``clusters`` they gather around that many centres (like real embeddings)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    if clusters:
        centres = rng.standard_normal((clusters, dim)).astype(np.float32) * 3
        x += centres[rng.integers(0, clusters, n)]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def refusal(call):
    """The ServiceError that ``call()`` raises, checked to come from the server (a grpc error is its cause)."""
    import grpc
    from nextpara.client import ServiceError

    with pytest.raises(ServiceError) as err:
        call()
    assert isinstance(err.value.__cause__, grpc.RpcError)
    return err.value


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, stdin: str | None = None):
    """Run ``python -m nextpara ARGS`` as a user would (``stdin``: text piped to it); returns the CompletedProcess."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "nextpara", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


@pytest.fixture(scope="session")
def trained_store(tmp_path_factory):
    """A real store (the first 60 built-in documents, MiniLM) with a small trained model: built once per run, by the
    first worker that asks (`make test` runs two), and copied into each worker's own directory. A server takes the
    store's write lock, so the workers cannot share one copy."""
    import fcntl
    import shutil

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent / "trained" if worker else base / "trained"  # a worker's parent is this run's directory
    shared.mkdir(exist_ok=True)
    with open(shared / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for the build instead of doing it again
        if (shared / "failed").exists():
            raise RuntimeError(f"the trained store's build failed in another worker: {(shared / 'failed').read_text()}")
        if not (shared / "store").exists():
            part = shared / "part"  # built aside and renamed: "store" is there only once it is whole
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir()
            try:
                build_trained_store(part)
            except BaseException as e:
                (shared / "failed").write_text(repr(e))
                raise
            (part / "store").rename(shared / "store")
    root = tmp_path_factory.mktemp("trained")
    shutil.copytree(shared / "store", root / "store")
    return root / "store"


def build_trained_store(root: Path) -> None:
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.train_flow import train
    from nextpara.store.corpus import CorpusReader
    from nextpara.store.ingest import build

    docs = [d for _, d in zip(range(60), CorpusReader("builtin"))]
    with open(root / "builtin60.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "paragraphs": d.paragraphs}) + "\n")
    build(str(root / "builtin60.jsonl"), root / "store", quiet=True)
    train(root / "store", {"d_model": 64, "n_heads": 4, "n_context_layers": 1},
          TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=64, val_queries=100, n_candidates=30), quiet=True,
          force=True)  # the servers of the tests serve this store's own small model, whatever the guard would say


class LiveServer:
    """A real nextpara gRPC server on 127.0.0.1 (port 0), running in a thread with its own event loop."""

    def __init__(self, data_dir, **settings):
        import asyncio
        import threading

        from nextpara.server.config import ServerSettings
        from nextpara.server.main import run_server

        self.settings = ServerSettings(data_dir=str(data_dir), address="127.0.0.1:0", metrics_address="127.0.0.1:0",
                                       grace_seconds=2.0, **settings)
        self.loop = asyncio.new_event_loop()
        self.ready = asyncio.Event()
        self.stop_event = asyncio.Event()
        self.error: BaseException | None = None

        def main():
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(run_server(self.settings, Path(data_dir), self.ready, self.stop_event))
            except BaseException as e:  # surfaced by start()
                self.error = e

        self.thread = threading.Thread(target=main, daemon=True)

    def start(self, timeout: float = 120) -> "LiveServer":
        import time

        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.ready.is_set():
            if self.error or not self.thread.is_alive():
                raise RuntimeError(f"server failed to start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("server did not become ready")
            time.sleep(0.05)
        self.port = self.ready.port
        self.metrics_port = self.ready.metrics_port
        self.address = f"127.0.0.1:{self.port}"
        return self

    def metric(self, sample: str) -> float:
        """The value of one sample of the server's metrics page (``name{labels}`` as it is printed); 0 when absent."""
        import re
        import urllib.request

        page = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read().decode()
        found = re.search(rf"^{re.escape(sample)} (\S+)$", page, re.M)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def server_store(trained_store, tmp_path_factory):
    """A private copy of the trained store: servers write to it."""
    import shutil

    copy = tmp_path_factory.mktemp("served") / "store"
    shutil.copytree(trained_store, copy, ignore=shutil.ignore_patterns("write.lock"))
    return copy


@pytest.fixture(scope="module")
def server(server_store):
    """A live server on a copy of the trained store, one per test module that asks for it."""
    s = LiveServer(server_store).start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    from nextpara.client import Client

    with Client(server.address, timeout=60) as c:
        yield c


def vector_store(root: Path, embedder_name: str, docs) -> Path:
    """Build a store of precomputed vectors under ``root`` from (doc_id, paragraphs, vectors) triples."""
    from nextpara.store.ingest import build

    corpus = root / f"{embedder_name}.jsonl"
    with open(corpus, "w") as f:
        for doc_id, paragraphs, vectors in docs:
            f.write(json.dumps({"doc_id": doc_id, "paragraphs": paragraphs, "vectors": np.round(vectors, 6).tolist()}) + "\n")
    build(str(corpus), root / "store", embedder=f"precomputed:{embedder_name}", quiet=True)
    return root / "store"


def count_word_searches(store, monkeypatch) -> list[int]:
    """The store's real word search with its calls counted: the returned list gets each call's number of texts."""
    searches, word_search = [], store.word_search

    def counted(*args, **kwargs):
        searches.append(len(args[0]))
        return word_search(*args, **kwargs)

    monkeypatch.setattr(store, "word_search", counted)
    return searches
