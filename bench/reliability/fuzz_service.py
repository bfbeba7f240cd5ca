"""Bad input, systematically: generated requests for every RPC against a live ``nextpara serve``.

    python -m bench.reliability.fuzz_service --data-dir /tmp/peps-bench                  # 10,000 requests
    python -m bench.reliability.fuzz_service --data-dir DIR --requests 600 --seed 3      # (tests/test_fuzz.py's setting)

The data dir is copied first; the server runs on the copy as a separate process. hypothesis draws
each request from strategies over the proto's messages: every RPC (PredictNext, Rerank,
RerankStream, AddDocuments, DeleteDocuments with and without allow_missing, GetParagraphs, ListDocuments,
GetDocument, GetInfo, Reload, Backup) with field values
that are valid, empty, huge, negative, out of range, NaN/inf, of the wrong dimension, duplicated
or unknown, documents' labels and PredictNext's filters (doc_id lists, labels, min_score,
max_per_document) and ListDocuments' labels among them; the reads with min_index_version (any, and with
wait_for_index one the store has reached, so that no call waits for its deadline); streams that the client abandons midway; and raw bytes that are not the message
(random, or a valid request with bytes flipped, which also yields invalid UTF-8 in strings).

For each request: the status must be one the service documents (OK, INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, or CANCELLED for a stream the client
abandoned), never INTERNAL or UNKNOWN; every refusal, and every RerankStream item answered with an
error, must carry a reason (google.rpc.ErrorInfo); the server must stay up; and a rejected request must
leave the store unchanged (GetInfo's documents, paragraphs and index version before == after): an
AddDocuments refused before it committed a message, and every RerankStream, too.
Prints a table, writes bench/results/fuzz_service.{json,md}.
"""

from __future__ import annotations

import base64
import collections
import json
import shutil
import tempfile
import time
from pathlib import Path

import grpc

from bench.record import argument_parser, save, stamp

SERVICE = "/nextpara.v1.NextParagraphService/"
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED}


def strategies(dim: int, n_paragraphs: int, doc_ids: list[str], generation: int = 0):
    """A hypothesis strategy of (rpc name, request or list of requests, options); ``generation``: the store's when the
    run starts (a read may wait for one up to it, which it has reached)."""
    from hypothesis import strategies as st
    from nextpara.v1 import nextpara_pb2 as pb

    floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
    good_vec = st.lists(st.floats(-1, 1, width=32), min_size=dim, max_size=dim)
    vector = st.one_of(good_vec, st.lists(floats, min_size=0, max_size=dim + 3),
                       st.lists(floats, min_size=dim, max_size=dim), st.just([0.0] * dim))
    text = st.one_of(st.text(max_size=40), st.just(""), st.just(" \n\t"), st.text(min_size=2000, max_size=6000),
                     st.sampled_from(["The next paragraph.", "ünïcødé ✓ 中文", "\x00", "a" * 100_000]))
    para_id = st.one_of(st.integers(0, max(n_paragraphs + 10, 10)), st.integers(-2**63, 2**63 - 1))
    item = st.one_of(text.map(lambda t: pb.ContextParagraph(text=t)),
                     para_id.map(lambda i: pb.ContextParagraph(paragraph_id=i)),
                     vector.map(lambda v: pb.ContextParagraph(vector=pb.Vector(values=v))),
                     st.just(pb.ContextParagraph()))
    items = st.lists(item, max_size=12)
    top_k = st.one_of(st.integers(0, 20), st.integers(0, 2**32 - 1))
    # read your writes: any min_index_version (INDEX_BEHIND when the store has not reached it), or one it has reached
    # with wait_for_index
    fresh = st.one_of(st.just({}), st.integers(-2**63, 2**63 - 1).map(lambda v: {"min_index_version": v}),
                      st.integers(0, generation).map(lambda v: {"min_index_version": v, "wait_for_index": True}),
                      st.just({"min_index_version": generation + 1}))
    doc_id = st.one_of(st.sampled_from(doc_ids[:50] or ["x"]), st.text(max_size=20), st.just(""),
                       st.text(min_size=513, max_size=600), st.uuids().map(lambda u: f"fuzz-{u}"))
    label_text = st.one_of(st.sampled_from(["tenant", "acme", "initech", "tier", "gold"]), st.text(max_size=12),
                           st.just(""), st.just(" "), st.just("a\x00b"), st.text(min_size=129, max_size=140),
                           st.just("v" * 1025))
    labels = st.one_of(st.dictionaries(label_text, label_text, max_size=4),
                       st.dictionaries(st.sampled_from(["tenant", "tier"]), st.sampled_from(["acme", "initech", "gold"]),
                                       min_size=1, max_size=2),
                       st.dictionaries(st.text(min_size=1, max_size=8), st.just("x"), min_size=65, max_size=70))
    document = st.builds(lambda d, t, ps, vs, ls: pb.Document(doc_id=d, title=t, paragraphs=ps,
                                                              vectors=[pb.Vector(values=v) for v in vs], labels=ls),
                         doc_id, st.text(max_size=30), st.lists(text, max_size=4),
                         st.one_of(st.just([]), st.lists(vector, max_size=4)), labels)
    retrieval_filter = st.builds(
        lambda only, deny, ls, score, n: pb.RetrievalFilter(doc_ids=only, exclude_doc_ids=deny, labels=ls, min_score=score,
                                                            max_per_document=n),
        st.one_of(st.lists(doc_id, max_size=4), st.integers(10_001, 10_010).map(lambda n: [f"many-{i}" for i in range(n)])),
        st.lists(doc_id, max_size=4), labels, st.one_of(st.none(), floats), st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1)))
    predict = st.builds(lambda c, k, o, a, x, f, y: pb.PredictNextRequest(context=c, top_k=k, omit_text=o,
                                                                          include_attention=a, exclude_doc_ids=x, filter=f,
                                                                          **y),
                        items, top_k, st.booleans(), st.booleans(), st.lists(doc_id, max_size=3),
                        st.one_of(st.none(), retrieval_filter), fresh)
    rerank = st.builds(lambda r, c, k, n, f: pb.RerankRequest(request_id=r, context=c, candidates=k, top_k=n, **f),
                       st.text(max_size=10), items, st.lists(item, max_size=30), top_k, fresh)
    token = st.one_of(st.just(""), st.text(max_size=30), st.tuples(doc_id, st.one_of(st.just({}), st.builds(
        lambda f: {"labels": f}, st.text(max_size=16)))).map(lambda t: base64.urlsafe_b64encode(
            json.dumps({"v": 1, "after": t[0], **t[1]}).encode()).decode()))  # as ListDocuments makes them, any doc_id
    # a RerankStreamRequest has RerankRequest's fields and numbers
    stream_item = rerank.map(lambda r: pb.RerankStreamRequest.FromString(r.SerializeToString()))
    raw = st.one_of(st.binary(max_size=200), st.tuples(predict, st.integers(0, 10**6), st.integers(1, 255)).map(
        lambda t: flip(t[0].SerializeToString(), t[1], t[2])))
    return st.one_of(
        st.tuples(st.just("PredictNext"), predict),
        st.tuples(st.just("Rerank"), rerank),
        st.tuples(st.just("RerankStream"), st.tuples(st.lists(stream_item, min_size=1, max_size=4), st.integers(0, 4))),
        st.tuples(st.just("AddDocuments"), st.tuples(st.lists(st.builds(lambda ds: pb.AddDocumentsRequest(documents=ds),
                                                                        st.lists(document, max_size=3)),
                                                              min_size=0, max_size=3), st.integers(0, 3))),
        st.tuples(st.just("DeleteDocuments"), st.builds(lambda ds, m: pb.DeleteDocumentsRequest(doc_ids=ds, allow_missing=m),
                                                         st.lists(doc_id, max_size=4), st.booleans())),
        st.tuples(st.just("ListDocuments"), st.builds(lambda n, t, ls, f: pb.ListDocumentsRequest(page_size=n, page_token=t,
                                                                                                   labels=ls, **f),
                                                       top_k, token, st.one_of(st.just({}), labels), fresh)),
        st.tuples(st.just("GetDocument"), st.builds(lambda d, f: pb.GetDocumentRequest(doc_id=d, **f), doc_id, fresh)),
        st.tuples(st.just("GetParagraphs"), st.builds(lambda ids, v, f: pb.GetParagraphsRequest(paragraph_ids=ids,
                                                                                                 include_vectors=v, **f),
                                                       st.one_of(st.lists(para_id, max_size=20),
                                                                 st.lists(para_id, min_size=5000, max_size=20000)),
                                                       st.booleans(), fresh)),
        st.tuples(st.just("GetInfo"), fresh.map(lambda f: pb.GetInfoRequest(**f))),
        st.tuples(st.just("Reload"), st.just(pb.ReloadRequest())),
        # the fuzzed server has no --backup-dir: every Backup is refused (a bad destination first), changing nothing
        st.tuples(st.just("Backup"), st.one_of(st.text(max_size=30), st.sampled_from(["", "../up", "/abs", "a/../../b"]))
                  .map(lambda d: pb.BackupRequest(destination=d))),
        st.tuples(st.sampled_from(["PredictNext", "Rerank", "AddDocuments", "GetParagraphs"]).map(lambda m: "raw:" + m), raw),
    )


def flip(data: bytes, at: int, mask: int) -> bytes:
    if not data:
        return bytes([mask])
    b = bytearray(data)
    b[at % len(b)] ^= mask
    return bytes(b)


class Fuzzer:
    def __init__(self, address: str):
        from nextpara.v1 import nextpara_pb2 as pb
        from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * 2**20),
                                                               ("grpc.max_receive_message_length", 64 * 2**20)])
        self.stub = pb_grpc.NextParagraphServiceStub(self.channel)
        self.codes: collections.Counter = collections.Counter()
        self.by_rpc: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failures: list[str] = []
        self.requests = 0
        self.item_refusals = 0  # RerankStream items answered with an error
        self.unsettled = False

    def state(self) -> tuple[int, int, int]:
        i = self.stub.GetInfo(self.pb.GetInfoRequest(), timeout=60)
        return i.documents, i.paragraphs, i.index_version

    def settled_state(self, quiet: float = 1.0, limit: float = 120.0) -> tuple[int, int, int]:
        """The store's state once a cancelled AddDocuments has finished: the server may still commit the
        message it had received when the client cancelled (the client cannot know). A delete of an unknown
        id waits for the server's write lock, which a write holds until its thread is done; then wait
        until nothing changes for ``quiet`` seconds."""
        try:
            self.stub.DeleteDocuments(self.pb.DeleteDocumentsRequest(doc_ids=["nextpara-fuzz-no-such-doc"]),
                                      timeout=limit)
        except grpc.RpcError:
            pass  # NOT_FOUND is the expected answer; it came after the pending write
        state, since, start = self.state(), time.monotonic(), time.monotonic()
        while time.monotonic() - since < quiet and time.monotonic() - start < limit:
            time.sleep(0.1)
            again = self.state()
            if again != state:
                state, since = again, time.monotonic()
        return state

    def send(self, rpc: str, request) -> tuple[grpc.StatusCode, str, dict | None]:
        """The call's code, message and, for a refusal, its ErrorInfo (reason and metadata; None without details). A
        RerankStream item refused without a reason is a failure here."""
        from nextpara.client.errors import from_rpc_error, from_status

        try:
            if rpc.startswith("raw:"):
                self.channel.unary_unary(SERVICE + rpc[4:])(request, timeout=60)
            elif rpc == "RerankStream":
                reqs, stop_after = request
                responses = self.stub.RerankStream(iter(reqs), timeout=60)
                for i, response in enumerate(responses):
                    if response.HasField("error"):
                        self.item_refusals += 1
                        if not from_status(response.error).reason:
                            self.failures.append(f"RerankStream item refused without a reason: {response.error.message}")
                    if i + 1 >= stop_after > 0:
                        responses.cancel()  # the client abandons the stream midway
                        break
            elif rpc == "AddDocuments":
                messages, stop_after = request
                call = self.stub.AddDocuments.future(iter(messages), timeout=60)
                if stop_after == 1:
                    call.cancel()
                call.result()
            else:
                getattr(self.stub, rpc)(request, timeout=60)
        except grpc.RpcError as e:
            error = from_rpc_error(e)
            return e.code(), e.details() or "", {"reason": error.reason, **error.metadata} if error.reason else None
        except grpc.FutureCancelledError:
            return grpc.StatusCode.CANCELLED, "", None
        return grpc.StatusCode.OK, "", None

    def call(self, rpc: str, request) -> None:
        before = self.state()
        code, detail, info = self.send(rpc, request)
        self.requests += 1
        self.codes[code.name] += 1
        self.by_rpc[rpc.split(":")[0] if not rpc.startswith("raw:") else "raw bytes"][code.name] += 1
        where = f"{rpc} {str(request)[:300]!r}"
        cancelled = code == grpc.StatusCode.CANCELLED and rpc in ("RerankStream", "AddDocuments")
        if code not in ALLOWED and not cancelled:
            self.failures.append(f"{code.name} {detail[:200]} for {where}")
        if code != grpc.StatusCode.OK and not cancelled and info is None:
            self.failures.append(f"{code.name} without a reason: {detail[:200]} for {where}")
        # a refused request changes nothing; a refused AddDocuments keeps only the messages it says it committed,
        # so it is checked when it committed none; RerankStream only reads, whatever it answered
        refused = code != grpc.StatusCode.OK and not cancelled and (
            rpc != "AddDocuments" or (info or {}).get("committedMessages") == "0")
        if (refused or rpc == "RerankStream") and self.state() != before:
            if self.unsettled:  # a cancelled AddDocuments may have committed meanwhile: settle, then ask again
                self.unsettled = False
                before = self.settled_state()
                self.send(rpc, request)
                changed = self.state() != before
            else:
                changed = True
            if changed:
                self.failures.append(f"store changed by a rejected request: {where}")
        if rpc == "AddDocuments" and code == grpc.StatusCode.CANCELLED:
            self.unsettled = True


def fuzz(address: str, requests: int, seed: int, dim: int, n_paragraphs: int, doc_ids: list[str],
         generation: int = 0) -> Fuzzer:
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import HypothesisWarning

    warnings.filterwarnings("ignore", category=HypothesisWarning)  # "overly large repr" of the huge cases

    fuzzer = Fuzzer(address)

    @hseed(seed)
    @settings(max_examples=requests, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategies(dim, n_paragraphs, doc_ids, generation))
    def one(case):
        fuzzer.call(*case)

    started = time.perf_counter()
    while fuzzer.requests < requests:  # hypothesis may stop early once it has exhausted its budget
        one()
        if time.perf_counter() - started > 3600:
            break
    return fuzzer


def run(data_dir: str, requests: int, seed: int = 0) -> dict:
    from nextpara.server.process import ServerProcess
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-fuzz-") as work:
        data = Path(work) / "store"
        shutil.copytree(data_dir, data, ignore=shutil.ignore_patterns("write.lock"))
        with open_store(data, readonly=True) as store:
            dim, n_paragraphs, generation = store.dim, store.count_paragraphs(), store.generation
            doc_ids = sorted({p.doc_id for p in store.get_paragraphs(list(range(1, min(n_paragraphs, 200))))})
        server = ServerProcess.local(data, "--grace-seconds", "1", require_model=False).start()
        started = time.perf_counter()
        try:
            fuzzer = fuzz(server.address, requests, seed, dim, n_paragraphs, doc_ids, generation)
            alive = server.alive and fuzzer.stub.GetInfo(fuzzer.pb.GetInfoRequest(), timeout=30) is not None
        finally:
            server.stop()
        return {"requests": fuzzer.requests, "seconds": round(time.perf_counter() - started, 1), "server_alive": alive,
                "server_exit_code": server.returncode, "codes": dict(fuzzer.codes),
                "by_rpc": {k: dict(v) for k, v in sorted(fuzzer.by_rpc.items())}, "failures": fuzzer.failures[:50],
                "rerank_stream_item_refusals": fuzzer.item_refusals,
                "n_failures": len(fuzzer.failures)}


def markdown(record: dict) -> str:
    r = record["result"]
    codes = sorted({c for v in r["by_rpc"].values() for c in v})
    lines = [f"# Service fuzzing\n\n`{record['command']}` on {record['date']}, {record['machine']}, {r['seconds']:.0f} s.\n",
             f"**{r['requests']:,} generated requests; server alive at the end: {r['server_alive']} (exit code after "
             f"SIGTERM {r['server_exit_code']}); INTERNAL: {r['codes'].get('INTERNAL', 0)}, UNKNOWN: "
             f"{r['codes'].get('UNKNOWN', 0)}; failures (bad status or a rejected request that changed the store): "
             f"{r['n_failures']}.**\n", "| RPC | " + " | ".join(codes) + " |", "| --- |" + " --- |" * len(codes)]
    lines += [f"| {rpc} | " + " | ".join(str(v.get(c, 0)) for c in codes) + " |" for rpc, v in r["by_rpc"].items()]
    if r["failures"]:
        lines += ["", "First failures:", ""] + [f"- {f}" for f in r["failures"][:10]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built (and trained) store; it is copied, not changed")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    record = {**stamp(__file__), "result": run(args.data_dir, args.requests, args.seed)}
    save("fuzz_service", record, markdown(record))
    return 0 if record["result"]["server_alive"] and not record["result"]["n_failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
