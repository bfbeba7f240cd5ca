"""Crash safety: ingestion killed with SIGKILL at random moments, and a full disk.

Both run the harness of bench/reliability/fault_injection.py (which records the full 20-run setting
in bench/results/fault_injection.md); here a shorter setting, asserted.
"""

import pytest

from bench.reliability import fault_injection


@pytest.mark.slow
def test_sigkill_during_build_and_add_documents_loses_nothing_acknowledged(tmp_path):
    runs = fault_injection.run(6, tmp_path, seed=7, quiet=True)
    bad = [r for r in runs if not r["ok"]]
    assert not bad, bad
    assert {r["kind"] for r in runs} == {"build", "rpc"}
    # the kills must land mid-write for the checks to prove anything
    assert sum(0 < r["documents"] for r in runs) >= 4 and sum(r["acknowledged"] for r in runs) > 0
    assert any(0 < r["acknowledged"] < r["offered"] for r in runs if r["kind"] == "rpc"), "no kill landed mid-stream"


@pytest.mark.slow
def test_full_disk_gives_a_clear_error_and_a_store_that_loads(tmp_path):
    why_not = fault_injection.can_mount_tmpfs()
    if why_not:
        pytest.skip(why_not)
    runs = fault_injection.full_disk_runs(tmp_path, quiet=True)
    assert all(r["ok"] for r in runs), runs
    errors = " ".join(r["error"] for r in runs)
    assert "while adding documents" in errors and "while writing the index snapshot" in errors


@pytest.mark.slow
@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_a_server_whose_disk_fills_refuses_writes_and_keeps_serving(tmp_path, index):
    why_not = fault_injection.can_mount_tmpfs()
    if why_not:
        pytest.skip(why_not)
    # a periodic snapshot hitting the full disk stopped the server: once for every store, then again for an
    # HNSW one, whose index file FAISS writes itself (its failed write was a RuntimeError, not an OSError)
    r = fault_injection.full_disk_server_run(tmp_path, index)
    assert r["ok"], r
    assert r["refused_code"] == "RESOURCE_EXHAUSTED" and "no space left" in r["refusal"] and r["acknowledged"] > 0
    assert r["refused_reason"] == "STORAGE_FULL" and r["refused_committed"] == "0"  # details of the refusal
