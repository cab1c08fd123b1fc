"""Table-driven classification: gRPC codes, the official SDK's exception types and messages, ErrorInfo."""

from __future__ import annotations

import errno

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from zerobus.sdk.shared import NonRetriableException, ZerobusException

from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    ConfigError,
    ErrorClass,
    FatalTransportError,
    ResumeMismatchError,
    SchemaRejectedError,
    StreamPoisonedError,
    TransientError,
    WriteBoundaryError,
    restated,
)
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.transport.classify import classify, schema_causes, to_transport_error


class FakeRpcError(grpc.RpcError):
    """Shaped like grpc's own call errors: code(), details(), trailing_metadata()."""

    def __init__(
        self, code: grpc.StatusCode, details: str = "", trailing: tuple[tuple[str, bytes], ...] = ()
    ):
        super().__init__(details)
        self._code = code
        self._details = details
        self._trailing = trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailing


def _schema_status_trailer(causes: str) -> tuple[tuple[str, bytes], ...]:
    info = error_details_pb2.ErrorInfo(
        reason="SCHEMA_VALIDATION_FAILED", domain="zerobus.databricks.com", metadata={"causes": causes}
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=3, message="schema mismatch", details=[detail])
    return (("grpc-status-details-bin", status.SerializeToString()),)


GRPC_CODE_TABLE = [
    (grpc.StatusCode.UNAVAILABLE, ErrorClass.TRANSIENT),
    (grpc.StatusCode.INTERNAL, ErrorClass.TRANSIENT),
    (grpc.StatusCode.UNKNOWN, ErrorClass.TRANSIENT),
    (grpc.StatusCode.DEADLINE_EXCEEDED, ErrorClass.TRANSIENT),
    (grpc.StatusCode.ABORTED, ErrorClass.TRANSIENT),
    (grpc.StatusCode.CANCELLED, ErrorClass.TRANSIENT),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorClass.CONCURRENCY_REJECT),
    (grpc.StatusCode.INVALID_ARGUMENT, ErrorClass.POISON),
    (grpc.StatusCode.OUT_OF_RANGE, ErrorClass.POISON),
    (grpc.StatusCode.UNAUTHENTICATED, ErrorClass.FATAL),
    (grpc.StatusCode.PERMISSION_DENIED, ErrorClass.FATAL),
    (grpc.StatusCode.NOT_FOUND, ErrorClass.FATAL),
    (grpc.StatusCode.UNIMPLEMENTED, ErrorClass.FATAL),
]


@pytest.mark.parametrize(("code", "expected"), GRPC_CODE_TABLE, ids=[c.name for c, _ in GRPC_CODE_TABLE])
def test_grpc_status_codes(code: grpc.StatusCode, expected: ErrorClass) -> None:
    assert classify(FakeRpcError(code, "boom")) is expected


def test_error_info_schema_validation_failed_wins_over_the_code() -> None:
    exc = FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad", _schema_status_trailer("FIELD_NOT_IN_TABLE"))
    assert classify(exc) is ErrorClass.SCHEMA_REJECTED


SDK_MESSAGE_TABLE = [
    # (exception type, message, expected) -- message shapes from the SDK's Rust core (tonic code texts)
    (
        NonRetriableException,
        "Failed to create stream: code: 'Some requested entity was not found', "
        'message: "table main.default.nope"',
        ErrorClass.FATAL,
    ),
    (
        NonRetriableException,
        "Failed to create stream: code: 'The request does not have valid authentication "
        'credentials\', message: "token expired"',
        ErrorClass.FATAL,
    ),
    (
        NonRetriableException,
        "code: 'The caller does not have permission to execute the specified operation'",
        ErrorClass.FATAL,
    ),
    (
        NonRetriableException,
        "Invalid schema: SCHEMA_VALIDATION_FAILED causes=FIELD_NOT_IN_TABLE",
        ErrorClass.SCHEMA_REJECTED,
    ),
    (NonRetriableException, "Invalid argument: Ingest payload too large", ErrorClass.POISON),
    (
        NonRetriableException,
        "Stream closed: code: 'Client specified an invalid argument', message: \"bad row\"",
        ErrorClass.POISON,
    ),
    (NonRetriableException, "Invalid table name: nope", ErrorClass.FATAL),
    (NonRetriableException, "Invalid UC token: 401 Unauthorized", ErrorClass.FATAL),
    (
        NonRetriableException,
        'Specified UC token is in invalid format: Client error (401): {"error":"invalid_client"}',
        ErrorClass.FATAL,
    ),
    # The SDK's TokenFetchError (network or HTTP 5xx) is retryable: the token endpoint is down, not refusing.
    (
        ZerobusException,
        "Token fetch failed: Network error: error sending request for url (http://127.0.0.1:9/oidc/v1/token)",
        ErrorClass.TRANSIENT,
    ),
    (
        ZerobusException,
        "Failed to create stream: code: 'Some resource has been exhausted', message: \"too many streams\"",
        ErrorClass.CONCURRENCY_REJECT,
    ),
    (ZerobusException, "Flush timed out", ErrorClass.TRANSIENT),
    (ZerobusException, "Waiting for acknowledgement timed out", ErrorClass.TRANSIENT),
    (
        ZerobusException,
        "Stream closed: code: 'Deadline expired before operation could complete', message: "
        '"Server ack timeout"',
        ErrorClass.TRANSIENT,
    ),
    # A retryable code surfacing from the SDK means its own recovery gave up: the stream is dead.
    (
        ZerobusException,
        "Stream closed: code: 'The service is currently unavailable', message: \"gone\"",
        ErrorClass.POISON,
    ),
    (ZerobusException, "Failed to create stream: code: 'Internal error', message: \"x\"", ErrorClass.POISON),
]


@pytest.mark.parametrize(("exc_type", "message", "expected"), SDK_MESSAGE_TABLE)
def test_sdk_exceptions(exc_type: type[Exception], message: str, expected: ErrorClass) -> None:
    assert classify(exc_type(message)) is expected


OWN_TABLE = [
    (TransientError("x"), ErrorClass.TRANSIENT),
    (StreamPoisonedError("x"), ErrorClass.POISON),
    (ConcurrencyRejectedError("x"), ErrorClass.CONCURRENCY_REJECT),
    (SchemaRejectedError("x", causes=["TYPE_INCOMPATIBLE"]), ErrorClass.SCHEMA_REJECTED),
    (FatalTransportError("x"), ErrorClass.FATAL),
    (ConfigError("x"), ErrorClass.FATAL),
    (WriteBoundaryError("x", table="t", column="c", kind="nested_to_string"), ErrorClass.SCHEMA_REJECTED),
    (ValueError("bad"), ErrorClass.FATAL),
    (TimeoutError(), ErrorClass.TRANSIENT),
    (ConnectionResetError(), ErrorClass.TRANSIENT),
    (RuntimeError("unknown"), ErrorClass.FATAL),
]


@pytest.mark.parametrize(("exc", "expected"), OWN_TABLE, ids=[type(e).__name__ for e, _ in OWN_TABLE])
def test_own_and_builtin_exceptions(exc: BaseException, expected: ErrorClass) -> None:
    assert classify(exc) is expected


def test_to_transport_error_keeps_class_text_and_causes() -> None:
    wrapped = to_transport_error(
        FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad", _schema_status_trailer("TYPE_INCOMPATIBLE")),
        "ingest into main.raw.orders",
    )
    assert isinstance(wrapped, SchemaRejectedError)
    assert "main.raw.orders" in str(wrapped)
    assert isinstance(to_transport_error(ZerobusException("Flush timed out"), "flush"), TransientError)
    assert schema_causes(ValueError("causes: MISSING_REQUIRED_COLUMN,TYPE_INCOMPATIBLE")) == (
        "MISSING_REQUIRED_COLUMN",
        "TYPE_INCOMPATIBLE",
    )


SCHEMA_CAUSES_TABLE = [
    # (exception, expected causes)
    (
        FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "schema check failed",
            _schema_status_trailer("FIELD_NOT_IN_TABLE"),
        ),
        ("FIELD_NOT_IN_TABLE",),
    ),
    (
        FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad",
            _schema_status_trailer("MISSING_REQUIRED_COLUMN, TYPE_INCOMPATIBLE,,TYPE_INCOMPATIBLE"),
        ),
        ("MISSING_REQUIRED_COLUMN", "TYPE_INCOMPATIBLE"),
    ),
    (
        FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "FIELD_COUNT_MISMATCH", _schema_status_trailer("")),
        ("FIELD_COUNT_MISMATCH",),  # no metadata causes: the text is the fallback
    ),
    (
        NonRetriableException("Invalid schema: SCHEMA_VALIDATION_FAILED causes=FIELD_OUT_OF_ORDER"),
        ("FIELD_OUT_OF_ORDER",),
    ),
    (SchemaRejectedError("x", causes=["TYPE_INCOMPATIBLE"]), ("TYPE_INCOMPATIBLE",)),
    (FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad row"), ()),
]


@pytest.mark.parametrize(("exc", "expected"), SCHEMA_CAUSES_TABLE)
def test_schema_causes(exc: BaseException, expected: tuple[str, ...]) -> None:
    assert schema_causes(exc) == expected


def test_to_transport_error_carries_the_error_info_causes() -> None:
    raw = FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT, "schema check failed", _schema_status_trailer("FIELD_NOT_IN_TABLE")
    )
    wrapped = to_transport_error(raw, "ingest into main.raw.orders")
    assert isinstance(wrapped, SchemaRejectedError) and wrapped.causes == ("FIELD_NOT_IN_TABLE",)


def test_restated_keeps_the_type_and_fields_with_the_new_message() -> None:
    boundary = restated(WriteBoundaryError("a", table="t", column="c", kind="k"), "a\nWhere: f, row 3")
    assert type(boundary) is WriteBoundaryError and str(boundary) == "a\nWhere: f, row 3"
    assert (boundary.table, boundary.column, boundary.kind, boundary.columns) == ("t", "c", "k", ("c",))
    # A constructor with required keywords is not called: the fields are carried over as they are.
    span = OffsetRange(0, 5)
    mismatch = restated(ResumeMismatchError("m", table="t", source="s", partition="p", span=span), "m2")
    assert (str(mismatch), mismatch.span, mismatch.partition) == ("m2", span, "p")
    reset = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    again = restated(reset, f"{reset}\nDelivered before the failure: 3 row(s)")
    assert type(again) is ConnectionResetError and again.errno == errno.ECONNRESET
    assert (
        str(again)
        == f"[Errno {errno.ECONNRESET}] Connection reset by peer\nDelivered before the failure: 3 row(s)"
    )
