"""The errors of every part of nextpara, one hierarchy under :class:`NextparaError`.

The store, the model, batch jobs and the command line raise these; the server maps each class to
one gRPC status code (``nextpara.server.status``); the client's exceptions
(``nextpara.client.errors``) derive from :class:`NextparaError` too. Pure Python: importing it
costs nothing, so the client may.
"""


class NextparaError(Exception):
    """Base class of every error nextpara raises on purpose."""


class InvalidInputError(NextparaError, ValueError):
    """The caller's input is malformed: the message says what and where."""


class NotFoundError(NextparaError, KeyError):
    """Ids or documents that the store does not hold."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FailedPreconditionError(NextparaError):
    """The store or model is not in a state that allows the operation (not built, wrong embedder...)."""


class StoreMismatchError(FailedPreconditionError):
    """A data directory that was built differently from what the caller expects."""


class StoreLockedError(FailedPreconditionError):
    """Another process holds the data directory's write lock."""


class CorpusFormatError(InvalidInputError):
    """A corpus file that cannot be read; carries the file and line."""

    def __init__(self, path: str, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


class StorageFullError(NextparaError):
    """The data directory's file system is full: the write was not stored, earlier ones are intact."""


class OverloadedError(NextparaError):
    """The server's request queue is full: retry shortly."""
