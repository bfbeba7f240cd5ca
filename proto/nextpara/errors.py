"""The errors of every part of nextpara, one hierarchy under :class:`NextparaError`, and the reasons they carry.

The store, the model, batch jobs and the command line raise these; the server answers each with the gRPC status code
of its :class:`Reason` (``nextpara.server.status``) and sends the reason, the field at fault and the error's metadata
as google.rpc.Status details; the client's exceptions (``nextpara.client.errors``) derive from
:class:`NextparaError` too and carry the same attributes. Pure Python: importing it costs nothing, so the client may.
"""

from __future__ import annotations

import codecs
import enum
from typing import Mapping

DOMAIN = "nextpara"  # google.rpc.ErrorInfo.domain of every reason below


class Reason(str, enum.Enum):
    """Why a request was refused: the stable ``google.rpc.ErrorInfo.reason`` the service sends. The one list; the
    table in proto/nextpara/v1/nextpara.proto documents each, and server/status.py gives each its status code."""

    # INVALID_ARGUMENT
    MALFORMED_REQUEST = "MALFORMED_REQUEST"  # the bytes are not a valid request message
    FIELD_REQUIRED = "FIELD_REQUIRED"  # a required field is empty or unset
    OUT_OF_RANGE = "OUT_OF_RANGE"  # a number or length outside its allowed range
    DIMENSION_MISMATCH = "DIMENSION_MISMATCH"  # a vector whose length is not the store's dimension
    INVALID_VECTOR = "INVALID_VECTOR"  # NaN, infinite or zero vectors; vectors that do not match the paragraphs
    INVALID_TEXT = "INVALID_TEXT"  # a blank text, or one with a NUL character
    DUPLICATE_DOC_ID = "DUPLICATE_DOC_ID"  # a doc_id twice in one AddDocuments message
    VECTORS_REQUIRED = "VECTORS_REQUIRED"  # a text given to a store whose embedder cannot embed text
    INVALID_PAGE_TOKEN = "INVALID_PAGE_TOKEN"  # a page_token this service did not hand out
    INVALID_DESTINATION = "INVALID_DESTINATION"  # a Backup destination that is not a new directory in the backup dir
    INVALID_ARGUMENT = "INVALID_ARGUMENT"  # other bad input (no known request gets it: each has a reason above)
    # NOT_FOUND
    UNKNOWN_IDS = "UNKNOWN_IDS"  # paragraph ids or doc_ids that are not stored
    # FAILED_PRECONDITION
    NO_MODEL = "NO_MODEL"  # no model: none of the store's own, and the general model is missing from the install (a
    #                        server then refuses; a store it cannot read, another embedder's, is served by plain cosine,
    #                        while `eval --model general` there is refused with this reason)
    MODEL_UNREADABLE = "MODEL_UNREADABLE"  # the data directory's model file is not a nextpara checkpoint
    EMBEDDER_MISMATCH = "EMBEDDER_MISMATCH"  # the model was trained on another embedder or dimension than the store
    NO_WORD_INDEX = "NO_WORD_INDEX"  # the model takes word candidates and the (read-only) store has no word index
    READ_ONLY_REPLICA = "READ_ONLY_REPLICA"  # a write sent to a --read-only replica
    INDEX_BEHIND = "INDEX_BEHIND"  # the server's index is older than the request's min_index_version
    FAILED_PRECONDITION = "FAILED_PRECONDITION"  # another state that forbids the call (e.g. no --backup-dir)
    # RESOURCE_EXHAUSTED
    QUEUE_FULL = "QUEUE_FULL"  # the server's call queue is full: retry after RetryInfo.retry_delay
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"  # a request (or the response it asks for) over the message size limit
    STORAGE_FULL = "STORAGE_FULL"  # the data directory's disk is full: the write was not stored
    # UNAVAILABLE
    EMBEDDING_SERVICE_FAILED = "EMBEDDING_SERVICE_FAILED"  # the store's remote embeddings endpoint failed
    LOADING = "LOADING"  # the server is still loading its store and model (health NOT_SERVING): retry
    # UNAUTHENTICATED, PERMISSION_DENIED
    TOKEN_MISSING = "TOKEN_MISSING"  # auth is on and no bearer token was sent
    TOKEN_INVALID = "TOKEN_INVALID"  # the bearer token is not one of the server's
    WRITE_ROLE_REQUIRED = "WRITE_ROLE_REQUIRED"  # a read token calling a write method
    # INTERNAL
    INTERNAL_ERROR = "INTERNAL_ERROR"  # a bug in the server, logged there

    def __str__(self) -> str:
        return self.value


class NextparaError(Exception):
    """Base class of every error nextpara raises on purpose.

    ``reason`` (a :class:`Reason`; each class has a default) says why for programs; ``field`` names the input at
    fault as a path into the request (``context[2].vector``, ``documents[0].doc_id``) when there is one; ``metadata``
    holds facts about it as strings (the expected and actual dimension, the unknown ids...)."""

    reason: Reason | None = None

    def __init__(self, *args, reason: Reason | None = None, field: str | None = None,
                 metadata: Mapping[str, object] | None = None):
        super().__init__(*args)
        if reason is not None:
            self.reason = reason
        self.field = field
        self.metadata = {k: str(v) for k, v in (metadata or {}).items()}


class InvalidInputError(NextparaError, ValueError):
    """The caller's input is malformed: the message says what and where."""

    reason = Reason.INVALID_ARGUMENT


class NotFoundError(NextparaError, KeyError):
    """Ids or documents that the store does not hold."""

    reason = Reason.UNKNOWN_IDS

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FailedPreconditionError(NextparaError):
    """The store or model is not in a state that allows the operation (not built, wrong embedder...)."""

    reason = Reason.FAILED_PRECONDITION


class StoreMismatchError(FailedPreconditionError):
    """A data directory that was built differently from what the caller expects."""


class StoreLockedError(FailedPreconditionError):
    """Another process holds the data directory's write lock."""


class IndexBehindError(FailedPreconditionError):
    """The server's index version is older than a read's ``min_index_version`` (and it did not, or could not in
    time, catch up)."""

    reason = Reason.INDEX_BEHIND


class CorpusFormatError(InvalidInputError):
    """A corpus file that cannot be read; carries the file, the line and what is wrong with it (``problem``)."""

    def __init__(self, path: str, line: int, problem: str):
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")  # 0: the whole file
        self.path, self.line, self.problem = path, line, problem


class StorageFullError(NextparaError):
    """The data directory's file system is full: the write was not stored, earlier ones are intact."""

    reason = Reason.STORAGE_FULL


class RetryLaterError(NextparaError):
    """A call the server cannot take now: retry after ``retry_delay`` seconds (a RetryInfo in the refusal)."""

    def __init__(self, *args, retry_delay: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.retry_delay = retry_delay


class OverloadedError(RetryLaterError):
    """The server's request queue is full: retry after ``retry_delay`` seconds."""

    reason = Reason.QUEUE_FULL


class LoadingError(RetryLaterError):
    """The server is still loading its store and model (its health says NOT_SERVING): retry after ``retry_delay``
    seconds."""

    reason = Reason.LOADING


class AuthError(NextparaError):
    """A call without a valid token (TOKEN_MISSING, TOKEN_INVALID) or whose token's role may not make it
    (WRITE_ROLE_REQUIRED)."""


def not_utf8_text(error: UnicodeDecodeError, start: bytes) -> str:
    """Why a file (whose first bytes are ``start``) is not UTF-8, and what to do: a UTF-16 or UTF-32 file (a Windows
    editor's "Unicode") says so by its byte-order mark."""
    boms = [("UTF-32", (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)), ("UTF-16", (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))]
    encoding = next((name for name, marks in boms if start.startswith(marks)), None)  # (UTF-32-LE's begins as UTF-16-LE's)
    said = f"not valid UTF-8 ({error.reason} at byte {error.start})"
    if encoding:
        return f"{said}: it is {encoding} (its byte-order mark says so); convert it to UTF-8"
    return f"{said}: convert it to UTF-8 (from the encoding it was written in, e.g. Latin-1 or Windows-1252)"


def not_utf8(text: str) -> str | None:
    """Why ``text`` cannot be stored, embedded or sent, or None if it can: a lone surrogate (a JSON ``"\\ud800"`` escape,
    or a file name's undecodable byte, decodes to one) has no UTF-8 form, and SQLite, the tokenizer and protobuf each
    fail on it in their own way. Checked wherever a text comes in, as the NUL character is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate ({text[e.start]!r} at character {e.start}), which is not text UTF-8 can carry"
    return None


DOCUMENT_FIELDS = ("doc_id", "title", "paragraphs", "vectors", "labels")  # what a document (a corpus line, a mapping) has


def misspelt_field(keys, fields=DOCUMENT_FIELDS) -> str | None:
    """Why a mapping of ``fields`` with these keys says other than it means, or None: a key that is none of the fields
    but one of them spelt another way (case, "_" or "-", a plural's "s": "label" for "labels", "DocId" for "doc_id")
    while that field is absent, which a reader would ignore, losing what it held. Other keys (a corpus's "source" or
    "license", "vector_ids") are left to be ignored."""
    def plain(name: str) -> str:
        return name.lower().replace("_", "").replace("-", "")

    absent = {plain(f): f for f in fields if f not in keys}
    for key in keys:
        if isinstance(key, str) and key not in fields:
            for form in (plain(key), plain(key) + "s", plain(key).removesuffix("s")):
                if form in absent:
                    return f"unknown field {key!r} (did you mean {absent[form]!r}?)"
    return None


def json_kind(value: object) -> str:
    """What a JSON value is, in the words of JSON (``a string``, not ``str``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    kinds = {str: "a string", int: "a number", float: "a number", dict: "an object", list: "a list"}
    return kinds.get(type(value), type(value).__name__)
