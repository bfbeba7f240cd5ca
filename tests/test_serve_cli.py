"""`nextpara serve` as a process, driven by the client commands; TLS; SIGTERM shuts down gracefully."""

import json
import os
import shutil
import subprocess

import pytest
from conftest import run_cli
from nextpara.client import Client, Unavailable
from nextpara.server.process import ServerProcess


def start_serve(data_dir, *extra) -> ServerProcess:
    return ServerProcess.local(data_dir, "--grace-seconds", "2", *extra).start()


def stop_serve(server: ServerProcess):
    """SIGTERM; the exit code and everything the server logged."""
    return server.stop(), server.log


@pytest.mark.slow
def test_serve_and_the_client_commands(server_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(server_store, store, ignore=shutil.ignore_patterns("write.lock"))
    server = start_serve(store)
    address = server.address
    try:
        r = run_cli("status", "--address", address)
        assert r.returncode == 0 and "health        SERVING" in r.stdout, r.stderr
        r = run_cli("predict", "--address", address, "--explain", "-k", "3", "--id", "1", "--id", "2", "Some text of my own.")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("1. ") and "head 0:" in r.stdout and "3 context paragraphs used" in r.stdout
        corpus = tmp_path / "add.jsonl"
        corpus.write_text(json.dumps({"doc_id": "cli-doc", "paragraphs": ["Added from the command line.", "Twice."]}) + "\n")
        r = run_cli("add", str(corpus), "--address", address)
        assert r.returncode == 0 and "1 added" in r.stdout and "2 paragraphs written" in r.stdout, r.stderr
        r = run_cli("delete", "cli-doc", "--address", address)
        assert r.returncode == 0 and "1 documents (2 paragraphs) deleted" in r.stdout
        r = run_cli("delete", "cli-doc", "--address", address)
        assert r.returncode == 1 and "NOT_FOUND" in r.stderr  # the service's refusal: exit status 1
    finally:
        code, err = stop_serve(server)
    assert code == 0 and "shutting down" in err and "stopped" in err
    with Client(address, timeout=3) as c:
        with pytest.raises(Unavailable):
            c.info()


def make_certificates(tmp_path):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=nextpara test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr")
    (tmp_path / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "san.ext", "-out", "server.pem")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=someone else",
        "-keyout", "other.key", "-out", "other.pem")


@pytest.mark.slow
def test_tls(server_store, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make test certificates")
    make_certificates(tmp_path)
    store = tmp_path / "store"
    shutil.copytree(server_store, store, ignore=shutil.ignore_patterns("write.lock"))
    server = start_serve(store, "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key"))
    address = server.address
    try:
        with Client(address, root_certificates=str(tmp_path / "ca.pem"), timeout=30) as c:
            assert c.info().paragraphs > 0
        with Client(address, timeout=3) as plaintext:
            with pytest.raises(Unavailable):
                plaintext.info()
        with Client(address, root_certificates=str(tmp_path / "other.pem"), timeout=3) as wrong_ca:
            with pytest.raises(Unavailable):
                wrong_ca.info()  # the client verifies the server's certificate
        r = run_cli("status", "--address", address, "--ca-cert", str(tmp_path / "ca.pem"))
        assert r.returncode == 0 and "SERVING" in r.stdout, r.stderr
    finally:
        stop_serve(server)


def test_tls_files_that_cannot_serve_are_named_not_taken_for_a_port_in_use(tmp_path):
    """A key that is not the certificate's, a certificate that is not PEM, the two files swapped: grpc says only
    "Failed to bind to address", and serve said "cannot listen on 127.0.0.1:PORT" of a free port. A usage error that
    names both files, at once (before any store loads), and the same from the server itself."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make test certificates")
    import socket

    from conftest import LiveServer

    make_certificates(tmp_path)
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free: the refusal is not of the port
    for cert, key in [("server.pem", "other.key"), ("garbage.pem", "server.key"), ("server.key", "server.pem")]:
        cert, key = str(tmp_path / cert), str(tmp_path / key)
        r = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--address", f"127.0.0.1:{port}",
                    "--metrics-address", "", "--tls-cert", cert, "--tls-key", key, timeout=120)
        assert r.returncode == 2 and "cannot listen" not in r.stderr, r.stderr
        assert (f"cannot serve TLS with the certificate {cert!r} (--tls-cert) and the key {key!r} (--tls-key): check "
                "that the key is this certificate's private key") in r.stderr and "PEM" in r.stderr, r.stderr
    server = LiveServer(tmp_path / "data", tls_cert=str(tmp_path / "server.pem"), tls_key=str(tmp_path / "other.key"))
    with pytest.raises(RuntimeError, match="cannot serve TLS with the certificate"):
        server.start()  # create_server, where grpc's bind fails


def test_threads_are_divided_among_the_workers(monkeypatch):
    import faiss
    import torch
    from nextpara.server.runtime import size_threads

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        n = size_threads(workers=2)
        assert n == max(1, len(os.sched_getaffinity(0)) // 2)
        assert torch.get_num_threads() == n and faiss.omp_get_max_threads() == n
        assert size_threads(workers=1, threads=3) == 3 and torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "6")  # a shared machine's cap for the process, shared by the workers
        assert size_threads(workers=1) == 6 and size_threads(workers=2) == 3 and size_threads(workers=8) == 1
        assert size_threads(workers=1, threads=2) == 2  # an explicit setting wins
        monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # OpenMP's nested levels: the first is this process's
        assert size_threads(workers=2) == 2
        for bad in ("lots", "0", "\u00b2"):
            monkeypatch.setenv("OMP_NUM_THREADS", bad)
            assert size_threads(workers=2) == n
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])


def test_serve_refuses_impossible_sizes():
    """A usage error (exit 2) that names the flag, or the environment variable the value came from."""
    for flag in ("--workers", "--max-batch", "--max-queue"):
        r = run_cli("serve", flag, "0", timeout=60)
        assert r.returncode == 2 and f"{flag} must be at least 1, got 0" in r.stderr, r.stderr
    r = run_cli("serve", "--threads", "-1", timeout=60)
    assert r.returncode == 2 and "--threads must be at least 0" in r.stderr
    r = run_cli("serve", "--snapshot-seconds", "0", timeout=60)  # would spin the snapshot loop
    assert r.returncode == 2 and "--snapshot-seconds must be above 0, got 0.0" in r.stderr
    r = run_cli("serve", timeout=60, env={"NEXTPARA_WORKERS": "two"})
    assert r.returncode == 2 and "NEXTPARA_WORKERS='two': expected an integer (as --workers)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("serve", timeout=60, env={"NEXTPARA_MAX_QUEUE": "0"})
    assert r.returncode == 2 and "NEXTPARA_MAX_QUEUE must be at least 1, got 0" in r.stderr
    r = run_cli("serve", "--grace-seconds", "nan", timeout=60)  # NaN is not below 0, and not at least 0 either
    assert r.returncode == 2 and "--grace-seconds must be at least 0, got nan" in r.stderr, r.stderr
    r = run_cli("serve", "--max-wait-ms", "inf", timeout=60)  # a batch would wait for ever
    assert r.returncode == 2 and "--max-wait-ms must be a finite number, got inf" in r.stderr, r.stderr
    r = run_cli("serve", "--metrics-address", "localhost", timeout=60)  # no port: was a traceback at start
    assert r.returncode == 2 and "--metrics-address must be host:port, or [address]:port for IPv6 (port 0: any free " \
        "port), or '' for none; an IPv6 address goes in brackets: [::1]:9464, got 'localhost'" in r.stderr, r.stderr
    r = run_cli("serve", timeout=60, env={"NEXTPARA_GRACE_SECONDS": "inf"})
    assert r.returncode == 2 and "NEXTPARA_GRACE_SECONDS must be a finite number, got inf" in r.stderr, r.stderr


def test_a_metrics_port_in_use_is_named_with_the_flag_that_moves_it(tmp_path):
    """A second server on one host with the default --metrics-address (replicas of one data dir, say): one line, exit
    2, naming the flag, not a bare "Address already in use"; and at once, before a first run builds the default store
    (minutes) or a store loads."""
    import socket

    env = {"NEXTPARA_DATA_DIR": str(tmp_path / "data"), "NEXTPARA_CACHE_DIR": str(tmp_path / "cache")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("serve", "--address", "127.0.0.1:0", "--metrics-address", f"127.0.0.1:{port}", env=env,
                    timeout=60)  # a build of the built-in corpus first would take longer
    assert r.returncode == 2, r.stderr
    assert (f"cannot serve metrics on 127.0.0.1:{port} (Address already in use): give this server its own "
            "--metrics-address, or '' for none") in r.stderr and "Traceback" not in r.stderr
    assert "paragraphs written" not in r.stderr and "listening on" not in r.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())  # nothing built


def test_a_taken_port_is_refused_before_anything_is_built(tmp_path):
    """A port another server listens on (a real gRPC server, which shares its port by default) is one line, exit 2,
    naming the flag, before a first run builds the default store; the server's own listening socket never shares."""
    import socket
    from concurrent import futures

    import grpc
    from nextpara.server.config import ServerSettings
    from nextpara.server.main import channel_options

    env = {"NEXTPARA_DATA_DIR": str(tmp_path / "data"), "NEXTPARA_CACHE_DIR": str(tmp_path / "cache")}
    other = grpc.server(futures.ThreadPoolExecutor(1))
    port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        r = run_cli("serve", "--address", f"127.0.0.1:{port}", "--metrics-address", "", env=env, timeout=60)
        assert r.returncode == 2, r.stderr
        assert (f"cannot listen on 127.0.0.1:{port} (Address already in use): another server has this port; give "
                "this one its own --address") in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())  # nothing built
        ours = grpc.server(futures.ThreadPoolExecutor(1), options=channel_options(ServerSettings()))
        try:  # grpc-core's default (SO_REUSEPORT) would bind it beside the other server and split the calls
            bound = ours.add_insecure_port(f"127.0.0.1:{port}")
        except RuntimeError:
            bound = 0
        assert bound == 0
    finally:
        other.stop(None)
    with socket.socket() as s:  # and a free port is free: the check does not hold it
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    from nextpara.server.main import cannot_listen

    assert cannot_listen(f"127.0.0.1:{free}") is None


def test_listen_addresses_and_settings_read_from_the_environment(tmp_path, monkeypatch):
    """Refused before the server starts, exit 2: an address grpc would bind elsewhere (a port out of range wrapped
    round) or not at all, a yes-or-no variable that is neither (a typo made a replica a writer), a backup directory
    that is a file (the Backup RPC failed as INTERNAL)."""
    import argparse

    from nextpara.server.config import add_arguments, from_args

    for bad in ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:", "notanaddress", "127.0.0.1:abc", ":50051"):
        r = run_cli("serve", "--address", bad, "--metrics-address", "", timeout=60)
        assert r.returncode == 2 and f"--address must be host:port, or [address]:port for IPv6 (port 0: any free " \
            f"port); an IPv6 address goes in brackets: [::1]:50051, got {bad!r}" in r.stderr, (bad, r.stderr)
    r = run_cli("serve", "--metrics-address", "", timeout=60, env={"NEXTPARA_READ_ONLY": "maybe"})
    assert r.returncode == 2 and "NEXTPARA_READ_ONLY='maybe': expected 1, true, yes, on or 0, false, no, off (as " \
        "--read-only)" in r.stderr, r.stderr
    (tmp_path / "file").write_text("")
    r = run_cli("serve", "--metrics-address", "", "--backup-dir", str(tmp_path / "file"), timeout=60)
    assert r.returncode == 2 and "--backup-dir: " in r.stderr and "is a file, not a directory" in r.stderr, r.stderr
    r = run_cli("serve", "--metrics-address", "", "--data-dir", str(tmp_path / "s"), "--backup-dir",
                str(tmp_path / "s" / "backups"), timeout=60)  # every Backup was refused as inside the store
    assert r.returncode == 2 and f"is inside the store it would back up ({tmp_path / 's'})" in r.stderr, r.stderr
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_args(parser.parse_args(["--address", "unix:/tmp/nextpara.sock"])).address == "unix:/tmp/nextpara.sock"
    for word, value in (("on", True), ("Yes", True), ("1", True), ("off", False), ("0", False), ("", False)):
        monkeypatch.setenv("NEXTPARA_READ_ONLY", word)
        assert from_args(parser.parse_args([])).read_only is value, word


def test_metrics_addresses():
    """host:port and [v6]:port, an empty host meaning 127.0.0.1; anything else refused before the server starts."""
    import socket

    from nextpara.server.config import split_host_port
    from nextpara.server.metrics import Metrics

    assert split_host_port("0.0.0.0:9464") == ("0.0.0.0", 9464) and split_host_port(":0") == ("127.0.0.1", 0)
    assert split_host_port("[::1]:9464") == ("::1", 9464) and split_host_port("localhost:1") == ("localhost", 1)
    for bad in ("localhost", "::1", "::1:9464", ":::9464", "h:\u00b2", "h:\u0669", "h:65536", "h:-1", "[::1]", "h:",
                "[]:9464", "h:" + "0" * 5000):
        assert split_host_port(bad) is None, bad
    metrics = Metrics()
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pass  # no IPv6 loopback on this machine: the parse above is what can be checked
    else:
        port = metrics.serve("[::1]:0")
        try:
            with socket.create_connection(("::1", port), timeout=5):
                pass  # served on the IPv6 loopback, brackets dropped
        finally:
            metrics.close()
    with pytest.raises(ValueError, match="an IPv6 address goes in brackets"):  # settings built without from_args
        Metrics().serve("::1:0")
