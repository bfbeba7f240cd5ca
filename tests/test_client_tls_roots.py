"""A client's root_certificates that hold no PEM certificate are refused where they are given, naming them; good ones
(a path, a pathlib.Path, bytes) verify a real TLS server on 127.0.0.1, from both clients."""

import asyncio
import shutil
from pathlib import Path

import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, InvalidInputError
from test_serve_cli import make_certificates


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make test certificates")
    root = tmp_path_factory.mktemp("tls")
    make_certificates(root)
    vectors = unit_vectors(4, 8, seed=11)
    store = vector_store(root, "tls8", [("d0", ["One.", "Two."], vectors[:2]), ("d1", ["Three.", "Four."], vectors[2:])])
    s = LiveServer(store, tls_cert=str(root / "server.pem"), tls_key=str(root / "server.key")).start()
    s.certificates = root
    yield s
    s.stop()


def test_roots_without_a_pem_certificate_are_refused_naming_them(tls_server):
    certs = tls_server.certificates
    (certs / "ca.der").write_bytes(b"0\x82\x03\x1b0\x82\x02\x03\xa0\x03")  # the start of a DER certificate
    for roots, says in [(str(certs / "ca.der"), f"no PEM certificate in {certs / 'ca.der'}"),
                        (certs / "server.key", f"no PEM certificate in {certs / 'server.key'}"),  # the key by mistake
                        (b"garbage", "no PEM certificate in the bytes given")]:
        with pytest.raises(InvalidInputError) as err:  # it was UNAVAILABLE "Failed to create security handshaker"
            Client(tls_server.address, root_certificates=roots, timeout=5)  # at each call, retried as an outage
        assert err.value.field == "root_certificates" and says in str(err.value), str(err.value)

    async def aio():
        with pytest.raises(InvalidInputError, match="no PEM certificate in the bytes given"):
            AsyncClient(tls_server.address, root_certificates=b"garbage")
    asyncio.run(aio())
    with pytest.raises(TypeError, match="root_certificates must be PEM bytes or a file's path, got int"):
        Client(tls_server.address, root_certificates=3)


def test_roots_as_a_path_a_pathlib_path_or_bytes_verify_the_server(tls_server):
    ca = tls_server.certificates / "ca.pem"
    for roots in (str(ca), Path(ca), ca.read_bytes()):  # a pathlib.Path was refused by grpc's TypeError
        with Client(tls_server.address, root_certificates=roots, timeout=60) as c:
            assert c.info().documents == 2

    async def aio():
        async with AsyncClient(tls_server.address, root_certificates=Path(ca), timeout=60) as a:
            return (await a.info()).documents
    assert asyncio.run(aio()) == 2
