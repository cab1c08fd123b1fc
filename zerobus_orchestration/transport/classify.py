"""The transport-specific classifier: any failure, mapped to the ``ErrorClass`` saying what the sink does.

The classes drive behaviour, not messages: TRANSIENT is retried in place without re-advancing
anything; POISON rebuilds the stream and re-submits what was not acknowledged; CONCURRENCY_REJECT
backs off and keeps sending on existing streams; SCHEMA_REJECTED and FATAL stop and surface.
Sources: gRPC status codes, the official SDK's ``ZerobusException`` / ``NonRetriableException`` and
their messages (tonic renders the code as its description text), and ``google.rpc.ErrorInfo`` with
reason ``SCHEMA_VALIDATION_FAILED`` (the Zerobus protocol's error model; see ``docs/architecture.md``).
Our own errors carry their class already; this module reads foreign ones.
"""

from __future__ import annotations

import re
from typing import Any

from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    ErrorClass,
    FatalTransportError,
    SchemaRejectedError,
    StreamPoisonedError,
    TableUnavailableError,
    TransientError,
    TransportError,
    ZerobusOrchestrationError,
)

# gRPC status code names, by the class the sink gives them.
# FAILED_PRECONDITION is fatal: gRPC defines it as "the client should not retry until the system state has
# been explicitly fixed" (grpc/grpc doc/statuscodes.md); the emulator refuses a failed table's streams with
# it. The SDK still retries it (every code but six is retryable to it), which only delays the failure.
_FATAL_CODES = frozenset(
    {"UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "UNIMPLEMENTED", "FAILED_PRECONDITION"}
)
_POISON_CODES = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE", "DATA_LOSS"})
_CONCURRENCY_CODES = frozenset({"RESOURCE_EXHAUSTED"})
# Everything else (UNAVAILABLE, INTERNAL, UNKNOWN, DEADLINE_EXCEEDED, ABORTED, CANCELLED) is transient.

# tonic's ``Code::description()`` texts, which the SDK embeds in its exception messages.
_TONIC_DESCRIPTIONS: dict[str, str] = {
    "client specified an invalid argument": "INVALID_ARGUMENT",
    "invalid argument": "INVALID_ARGUMENT",
    "deadline expired before operation could complete": "DEADLINE_EXCEEDED",
    "some requested entity was not found": "NOT_FOUND",
    "the caller does not have permission": "PERMISSION_DENIED",
    "some resource has been exhausted": "RESOURCE_EXHAUSTED",
    "resource exhausted": "RESOURCE_EXHAUSTED",
    "the system is not in a state required": "FAILED_PRECONDITION",
    "operation was attempted past the valid range": "OUT_OF_RANGE",
    "operation is not implemented or not supported": "UNIMPLEMENTED",
    "the service is currently unavailable": "UNAVAILABLE",
    "unrecoverable data loss or corruption": "DATA_LOSS",
    "the request does not have valid authentication credentials": "UNAUTHENTICATED",
    "the operation was aborted": "ABORTED",
    "the operation was cancelled": "CANCELLED",
    "internal error": "INTERNAL",
}

_SCHEMA_MARKERS = ("schema_validation_failed", "invalid schema", "schema mismatch", "invalidschema")
# "Specified UC token is in invalid format: Client error (401)": the SDK's text for a rejected client secret.
_AUTH_MARKERS = (
    "invalid uc token",
    "uc token is in invalid format",
    "invaliductoken",
    "token fetch",
    "unauthenticated",
    "permission denied",
)
# "Token fetch failed: Network error: error sending request for url (...)": the SDK's TokenFetchError, which
# it raises as retryable (a network error or HTTP 5xx from the token endpoint; rust/sdk/src/errors.rs in
# databricks/zerobus-sdk). Only a non-retriable token error (InvalidUCTokenError, HTTP 4xx) is fatal.
_TOKEN_FETCH_MARKERS = ("token fetch",)
_CONFIG_MARKERS = (
    "invalid table name",
    "invalid zerobus endpoint",
    "invalid uc endpoint",
    "invalidtablename",
)
_TIMEOUT_MARKERS = ("timed out", "deadline expired", "server ack timeout")
_CODE_TOKEN = re.compile(
    r"\b(?:code[:=]\s*'?)?([A-Z]{2,}(?:_[A-Z]+)+|UNAVAILABLE|INTERNAL|UNKNOWN|ABORTED|CANCELLED)\b"
)
_CAUSES = re.compile(
    r"\b(FIELD_NOT_IN_TABLE|MISSING_REQUIRED_COLUMN|FIELD_OUT_OF_ORDER|TYPE_INCOMPATIBLE|FIELD_COUNT_MISMATCH)\b"
)


def grpc_code_name(exc: BaseException) -> str | None:
    """The gRPC status code name of ``exc`` if it carries one (grpc.RpcError or ours)."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            value: Any = code()
        except Exception:
            return None
        name = getattr(value, "name", None)
        return str(name) if name else None
    if isinstance(code, str):
        return code
    return None


def schema_causes(exc: BaseException) -> tuple[str, ...]:
    """``SCHEMA_VALIDATION_FAILED`` causes: our own ``causes``, else the ErrorInfo ``causes`` metadata
    (comma-separated), else the tokens found in the exception text."""
    causes = getattr(exc, "causes", None)
    if causes:
        return tuple(causes)
    info = _error_info(exc)
    if info is not None and info[0] == "SCHEMA_VALIDATION_FAILED":
        listed = [token.strip() for token in info[1].get("causes", "").split(",")]
        if any(listed):
            # Kept as sent, unknown tokens included: the service may add causes before we know them.
            return tuple(dict.fromkeys(token for token in listed if token))
    return tuple(dict.fromkeys(_CAUSES.findall(str(exc))))


def _is_schema_rejection(exc: BaseException, text: str) -> bool:
    if any(marker in text for marker in _SCHEMA_MARKERS):
        return True
    info = _error_info(exc)
    return info is not None and info[0] == "SCHEMA_VALIDATION_FAILED"


def _status_details(exc: BaseException) -> list[Any]:
    """The ``google.rpc.Status`` details (``Any`` messages) in a grpc error's trailing metadata.

    A malformed detail must not hide the original error's class: it reads as no details at all.
    """
    trailing = getattr(exc, "trailing_metadata", None)
    if not callable(trailing):
        return []
    try:
        from google.rpc import status_pb2

        return [
            detail
            for key, value in trailing() or ()
            if key == "grpc-status-details-bin"
            for detail in status_pb2.Status.FromString(value).details
        ]
    except Exception:
        return []


def _error_info(exc: BaseException) -> tuple[str, dict[str, str]] | None:
    """(reason, metadata) of the ``google.rpc.ErrorInfo`` in a grpc error's trailing status details."""
    from google.rpc import error_details_pb2

    try:
        for detail in _status_details(exc):
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return str(info.reason), {str(k): str(v) for k, v in info.metadata.items()}
    except Exception:  # a malformed detail must not hide the original error's class
        return None
    return None


# A retry hint in a status message: "retry after 1.5s", "retry_delay_ms=500", "Retry-After: 2". The SDK
# 1.10.0 forwards only a status's code and message, never its details, so text is all that reaches us.
_RETRY_HINT = re.compile(
    r"retry[ _-]?(?:after|delay|in)(?P<ms_key>_ms)?\s*[:=]?\s*"
    r"(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s\b|sec|seconds?)?",
    re.IGNORECASE,
)


def retry_delay_s(exc: BaseException) -> float | None:
    """The delay the service asked for before a retry, in seconds; None if it sent no hint.

    From a ``google.rpc.RetryInfo`` in a gRPC error's status details, else from the message text of
    ``exc`` or of what it wraps (``__cause__``). A bare number counts as seconds.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        hinted = _retry_info(current)
        if hinted is None:
            match = _RETRY_HINT.search(str(current))
            if match is not None:
                value = float(match.group("value"))
                in_ms = match.group("ms_key") is not None or (match.group("unit") or "").lower() == "ms"
                hinted = value / 1000 if in_ms else value
        if hinted is not None:
            return hinted
        current = current.__cause__
    return None


def _retry_info(exc: BaseException) -> float | None:
    """The ``google.rpc.RetryInfo`` delay in a grpc error's trailing status details, in seconds."""
    from google.rpc import error_details_pb2

    try:
        for detail in _status_details(exc):
            info = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                return float(info.retry_delay.seconds) + float(info.retry_delay.nanos) / 1e9
    except Exception:  # a malformed detail is no hint; the caller's own backoff applies
        return None
    return None
    return None


def _code_from_text(text_lower: str, text: str) -> str | None:
    for description, code in _TONIC_DESCRIPTIONS.items():
        if description in text_lower:
            return code
    for token in _CODE_TOKEN.findall(text):
        if token in _FATAL_CODES | _POISON_CODES | _CONCURRENCY_CODES or token in {
            "UNAVAILABLE",
            "INTERNAL",
            "UNKNOWN",
            "ABORTED",
            "CANCELLED",
            "DEADLINE_EXCEEDED",
        }:
            return str(token)
    return None


def _class_of_code(code: str) -> ErrorClass:
    if code in _FATAL_CODES:
        return ErrorClass.FATAL
    if code in _CONCURRENCY_CODES:
        return ErrorClass.CONCURRENCY_REJECT
    if code in _POISON_CODES:
        return ErrorClass.POISON
    return ErrorClass.TRANSIENT


def _is_sdk_exception(exc: BaseException) -> tuple[bool, bool]:
    """(is a ZerobusException, is a NonRetriableException), without importing the SDK eagerly."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "ZerobusException" in names, "NonRetriableException" in names


def classify(exc: BaseException) -> ErrorClass:
    """What the sink should do about ``exc``. Table-driven tests pin every row."""
    if isinstance(exc, ZerobusOrchestrationError):
        return exc.error_class
    text = str(exc)
    lower = text.lower()
    if _is_schema_rejection(exc, lower):
        return ErrorClass.SCHEMA_REJECTED
    code = grpc_code_name(exc)
    if code is not None and code != "OK":
        return _class_of_code(code)
    is_sdk, non_retriable = _is_sdk_exception(exc)
    if is_sdk:
        found = _code_from_text(lower, text)
        if any(marker in lower for marker in _CONFIG_MARKERS):
            return ErrorClass.FATAL
        if found is not None:
            cls = _class_of_code(found)
            # The SDK only raises a retryable code after its own recovery gave up on the stream.
            if not non_retriable and cls is ErrorClass.TRANSIENT and not _mentions_timeout(lower):
                return ErrorClass.POISON
            return cls
        if not non_retriable and any(marker in lower for marker in _TOKEN_FETCH_MARKERS):
            return ErrorClass.TRANSIENT  # the token endpoint is down or failing, not refusing
        if any(marker in lower for marker in _AUTH_MARKERS):
            return ErrorClass.FATAL
        if _mentions_timeout(lower):
            return ErrorClass.TRANSIENT
        return ErrorClass.POISON if non_retriable else ErrorClass.TRANSIENT
    if isinstance(exc, ValueError | TypeError | KeyError):
        return ErrorClass.FATAL  # bad input or configuration: retrying cannot help
    if isinstance(exc, TimeoutError | ConnectionError):
        return ErrorClass.TRANSIENT
    return ErrorClass.FATAL


def _mentions_timeout(lower: str) -> bool:
    return any(marker in lower for marker in _TIMEOUT_MARKERS)


def to_transport_error(exc: BaseException, context: str) -> TransportError:
    """Wrap a foreign exception in the matching ``TransportError`` subclass, keeping its text."""
    if isinstance(exc, TransportError):
        return exc
    cls = classify(exc)
    message = f"{context}: {exc}"
    code = grpc_code_name(exc) or _code_from_text(str(exc).lower(), str(exc))
    if cls is ErrorClass.SCHEMA_REJECTED:
        return SchemaRejectedError(message, causes=schema_causes(exc), code=code)
    if cls is ErrorClass.CONCURRENCY_REJECT:
        return ConcurrencyRejectedError(message, code=code)
    if cls is ErrorClass.POISON:
        return StreamPoisonedError(message, code=code)
    if cls is ErrorClass.TRANSIENT:
        return TransientError(message, code=code)
    if code == "FAILED_PRECONDITION":
        # The service's own reason leads (the emulator's names the table, the cause and the repair).
        return TableUnavailableError(
            f"{service_message(exc)} ({context}: refused with FAILED_PRECONDITION; no retry helps until the "
            "table is repaired)"
        )
    return FatalTransportError(message, code=code)


def service_message(exc: BaseException) -> str:
    """The status message the service sent, from the SDK's ``code: '...', message: "..."`` text (tonic's
    rendering of a status); the whole text where there is none."""
    details = getattr(exc, "details", None)
    if callable(details):  # a grpc.RpcError carries it as such
        try:
            return str(details())
        except Exception:  # a broken error object: its text still says what happened
            return str(exc)
    text = str(exc)
    start = text.find('message: "')
    if start < 0:
        return text
    start += len('message: "')
    end = text.find('"', start)
    return text[start:end] if end > start else text[start:]
