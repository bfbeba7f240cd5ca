"""The client: the Python library for the nextpara service, sync and asyncio, with its commands (status, predict, add, delete).

May import grpcio, protobuf, the generated stubs and ``nextpara.errors``; never the store, model, server or batch
rooms, nor torch, faiss, numpy or sentence-transformers, so applications that only call the service stay light.
"""

from nextpara.errors import InvalidInputError, Reason

from .aio import AsyncClient
from .errors import (
                     DeadlineExceeded,
                     FailedPrecondition,
                     FieldViolation,
                     Internal,
                     InvalidArgument,
                     NextparaError,
                     NotFound,
                     PermissionDenied,
                     ResourceExhausted,
                     ServiceError,
                     Unauthenticated,
                     Unavailable,
)
from .sync import Client
from .types import (
    AddResult,
    BackupResult,
    DeleteResult,
    Document,
    DocumentPage,
    DocumentSummary,
    Filter,
    Info,
    ModelInfo,
    Paragraph,
    Prediction,
    PredictResult,
    RerankResult,
    StoredDocument,
    ValidationFigures,
)

__all__ = ["Client", "AsyncClient", "NextparaError", "ServiceError", "InvalidArgument", "NotFound", "FailedPrecondition",
           "ResourceExhausted", "Unauthenticated", "PermissionDenied", "DeadlineExceeded", "Unavailable", "Internal",
           "Reason", "FieldViolation", "InvalidInputError",
           "Prediction", "PredictResult", "RerankResult", "Paragraph", "Document", "AddResult", "DeleteResult", "Info",
           "BackupResult",
           "DocumentPage", "DocumentSummary", "StoredDocument", "Filter", "ModelInfo", "ValidationFigures"]
