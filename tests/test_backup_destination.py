"""Every Backup refused for its destination names the field, as the proto's errors say: a real server on 127.0.0.1
with a --backup-dir, the client library and grpcio with the proto's stubs."""

import grpc
import pytest
from conftest import LiveServer, unit_vectors, vector_store
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from nextpara.client import Client, InvalidArgument
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def backup_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("dest")
    vectors = unit_vectors(4, 8, seed=5)
    store = vector_store(root, "dest8", [("d0", ["One.", "Two."], vectors[:2]), ("d1", ["Three.", "Four."], vectors[2:])])
    (root / "backups").mkdir()
    (root / "backups" / "a-file").write_text("not a directory")
    s = LiveServer(store, backup_dir=str(root / "backups")).start()
    yield s
    s.stop()


def field_violations(error: grpc.RpcError) -> list[str]:
    fields = []
    for detail in rpc_status.from_call(error).details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    return fields


def test_a_destination_that_exists_or_cannot_be_made_is_refused_naming_the_field(backup_server):
    with Client(backup_server.address, timeout=60) as c:
        assert c.backup("nightly/one").path.endswith("nightly/one")
        refusals = {"nightly/one": "exists: name a new directory",  # it had no field, unlike "/abs" or "../x"
                    "a-file/copy": "cannot create the backup destination",
                    "../out": "is not a relative path inside the backup directory"}
        for dest, says in refusals.items():
            with pytest.raises(InvalidArgument) as err:
                c.backup(dest)
            e = err.value
            assert (e.reason, e.field, e.metadata["destination"]) == ("INVALID_DESTINATION", "destination", dest), e
            assert says in str(e), e
        assert c.backup("").path  # the server's own name still goes through
    with grpc.insecure_channel(backup_server.address) as channel:  # as a client of the proto alone sees it
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).Backup(pb.BackupRequest(destination="nightly/one"), timeout=60)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_violations(err.value) == ["destination"]


def test_a_name_the_server_chose_is_not_blamed_on_the_caller(tmp_path):
    """With --backup-dir a regular file, Backup("") failed naming the caller's empty field and, as its destination,
    a name of another timestamp than the path it had tried."""
    store = vector_store(tmp_path, "own8", [("d0", ["One.", "Two."], unit_vectors(2, 8, seed=6))])
    (tmp_path / "not-a-dir").write_text("a file")
    s = LiveServer(store, backup_dir=str(tmp_path / "not-a-dir")).start()
    try:
        with Client(s.address, timeout=60) as c, pytest.raises(InvalidArgument) as err:
            c.backup("")
    finally:
        s.stop()
    e = err.value
    assert (e.reason, e.field, e.metadata["destination"]) == ("INVALID_DESTINATION", None, ""), e
    assert e.metadata["path"].startswith(str(tmp_path / "not-a-dir" / "nextpara-g")), e.metadata
