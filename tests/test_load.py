"""Load, soak and overload at a short setting of bench/reliability/load_soak.py (its 10-minute run is in
bench/results)."""

import argparse

import pytest

from bench.reliability import load_soak


@pytest.mark.slow
def test_concurrent_mixed_load_then_overload_and_recovery(server_store):
    # 2,048 calls on one connection: before the server capped streams per connection, ~10% of them
    # ended CANCELLED (the first run of bench/reliability/load_soak.py, load_soak_first_run.md in git history);
    # this burst fails on that server
    args = argparse.Namespace(clients=8, minutes=0.5, window=10.0, max_queue=256, burst=2048, seed=1)
    result = load_soak.run(str(server_store), args)
    assert result["error_kinds"] == {}, result["error_kinds"]
    assert all(w["calls"] > 0 for w in result["windows"]) and len(result["windows"]) == 3
    assert sum(w["provoked_not_found"] for w in result["windows"]) > 0  # the provoked errors arrive as NOT_FOUND
    assert result["documents_added"] >= 5
    o = result["overload"]
    assert o["outcomes"].get("resource_exhausted", 0) > 0 and set(o["outcomes"]) <= {"ok", "resource_exhausted"}, o
    assert o["refused_max_ms"] < 5000, "refusals must be quick, not timeouts"
    assert o["recovered"] and result["server_alive"] and result["server_exit_code"] == 0
