"""``Transport`` over the official ``databricks-zerobus-ingest-sdk`` Arrow streams (Arrow Flight DoPut).

The same code talks to Databricks and to the local emulator: only the endpoint and the token URL
differ. Auth is OAuth client credentials (the SDK fetches and refreshes table-scoped tokens itself),
or a ``HeadersProvider`` when the caller owns auth.

The SDK recovers transparently from retryable failures (reconnects and replays unacknowledged
batches: at-least-once). What reaches us is therefore either a timeout (transient: the wait can be
retried), or a stream the SDK gave up on (poison: the pool rebuilds it and re-submits what was not
acknowledged, which ``unacked`` returns once the stream is closed).

Two SDK behaviours are corrected here rather than passed through (both measured against 1.10.0):

* ``ingest_batch`` demands a batch schema *identical* to the stream's, schema and field metadata
  included, and refuses anything else with ``NonRetriableException("Invalid argument: RecordBatch
  schema does not match stream schema")``. That would read as a poisoned stream, and a pool rebuilding
  on it re-submits the same batch forever. Metadata-only differences (pandas chunks carry their own
  index metadata) are relabelled to the stream schema; real differences raise ``SchemaRejectedError``
  naming the columns, before anything is sent, and the stream stays usable.
* A token endpoint refusing the client credentials (HTTP 401/403, "Specified UC token is in invalid
  format") surfaces as a bare ``NonRetriableException``; it is ``CredentialsRefusedError`` naming the
  client id (fix the credentials), not poison. A token endpoint that cannot be reached raises a
  retryable ``ZerobusException`` ("Token fetch failed: Network error"): transient, not refused.

Reconnects inside a stream are invisible in the SDK's Arrow API (no callback, no state, no recovery
count; ``ack_callback`` is refused for Arrow streams), yet each one replays every batch not yet
acknowledged, and a batch the service made durable without acknowledging it lands twice. What we can
observe, ``SdkStream.recoveries`` / ``rows_possibly_resent`` count:

* with a ``HeadersProvider`` (ours wraps the caller's per stream), every connection attempt: the SDK asks
  it for headers on each reconnect (recovery and rotation alike), so each call after the open is one;
* with OAuth client credentials (the SDK fetches and caches the token itself, no per-connection hook),
  the lack-of-ack timeout only: the SDK fails a connection whose oldest pending batch has gone
  ``server_lack_of_ack_timeout_ms`` without an acknowledgement and reconnects (recovery on), so a batch
  whose blocked ``wait_for_offset`` returned longer than that after its submit proves at least one such
  reconnect (a lower bound: a stall the waited-for batch did not span is missed). Fast reconnects (a
  retryable error mid-stream, a server-requested rotation) are not observable this way.

Rows possibly re-sent are the rows of every batch submitted and not yet seen durable when a reconnect
was observed (an upper bound; each batch counted once). Read-back finds the actual duplicates.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from pydantic import SecretStr

from zerobus_orchestration._version import __version__
from zerobus_orchestration.config import SdkStreamOptions, ZerobusConfig
from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    ConfigError,
    CredentialsRefusedError,
    ErrorClass,
    FatalTransportError,
    SchemaRejectedError,
    StreamPoisonedError,
    TransportError,
)
from zerobus_orchestration.transport.classify import to_transport_error

log = logging.getLogger(__name__)

APPLICATION_NAME = f"zerobus-orchestration/{__version__}"

# The SDK's Rust core logs through ``tracing`` to stdout at INFO by default, which would interleave
# with a command's own output (``--json``) and warns on every stream open about a header it sets
# itself. Errors only, unless the user asked for more with RUST_LOG.
os.environ.setdefault("RUST_LOG", "error")
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_PROXY_BYPASS_VARS = ("NO_PROXY", "no_proxy", "no_grpc_proxy")
# How the SDK reports the token endpoint refusing the client credentials (InvalidUCTokenError, 4xx).
_CREDENTIALS_REFUSED = ("uc token", "client error (401)", "client error (403)", "invalid_client")
# The SDK's per-call refusal of a batch whose schema is not the stream's; the stream stays usable.
_BATCH_SCHEMA_REFUSED = "schema does not match stream schema"
# A wait that took longer than this did block: the acknowledgement had not arrived when it started.
_BLOCKED_S = 0.002
# What ``ingest_batch`` says on a stream the SDK already gave up, whatever killed it.
_STREAM_CLOSED = "stream is closing or closed"


def bypass_proxy_for_loopback(url: str) -> None:
    """Make the SDK connect to a loopback endpoint directly.

    The SDK's Rust core tunnels every connection, 127.0.0.1 included, through ``*_proxy`` variables
    unless a ``NO_PROXY``-style variable matches the host
    (docs/architecture.md#the-zerobus-service-and-the-official-sdk).
    """
    host = urlparse(url).hostname or ""
    if host not in _LOOPBACK_HOSTS:
        return
    wanted = dict.fromkeys(("127.0.0.1", "localhost", host))
    for var in _PROXY_BYPASS_VARS:
        present = [h.strip() for h in os.environ.get(var, "").split(",") if h.strip()]
        missing = [h for h in wanted if h not in present]
        if missing:
            os.environ[var] = ",".join([*present, *missing])


def arrow_stream_options(options: SdkStreamOptions) -> Any:
    """Our pydantic options as the SDK's ``ArrowStreamConfigurationOptions``."""
    from zerobus import ArrowStreamConfigurationOptions, IPCCompression

    compression = {
        "none": IPCCompression.NONE,
        "lz4_frame": IPCCompression.LZ4_FRAME,
        "zstd": IPCCompression.ZSTD,
    }[options.ipc_compression]
    return ArrowStreamConfigurationOptions(
        max_inflight_batches=options.max_inflight_batches,
        recovery=options.recovery,
        recovery_timeout_ms=options.recovery_timeout_ms,
        recovery_backoff_ms=options.recovery_backoff_ms,
        recovery_retries=options.recovery_retries,
        server_lack_of_ack_timeout_ms=options.server_lack_of_ack_timeout_ms,
        flush_timeout_ms=options.flush_timeout_ms,
        connection_timeout_ms=options.connection_timeout_ms,
        ipc_compression=compression,
        stream_paused_max_wait_time_ms=options.stream_paused_max_wait_time_ms,
    )


def transport_error(
    exc: BaseException, context: str, *, client_id: str | None = None, token_url: str | None = None
) -> TransportError:
    """``classify.to_transport_error``, correcting two SDK cases that would otherwise read as poison.

    A batch refused for its schema is a schema rejection of that batch (the stream is fine); client
    credentials the token endpoint refused (a non-retriable token error) are ``CredentialsRefusedError``
    naming ``client_id`` and ``token_url`` where the caller knows them.
    """
    error = to_transport_error(exc, context)
    if not isinstance(error, StreamPoisonedError | FatalTransportError):
        return error
    text = str(exc).lower()
    if isinstance(error, StreamPoisonedError) and _BATCH_SCHEMA_REFUSED in text:
        return SchemaRejectedError(
            f"{context}: {exc}; fix: send batches with exactly the stream's schema (nothing was sent)",
            code="INVALID_ARGUMENT",
        )
    if _is_non_retriable(exc) and any(marker in text for marker in _CREDENTIALS_REFUSED):
        who = f"client ID {client_id!r}" if client_id is not None else "the client credentials"
        where = f" at {token_url}" if token_url is not None else ""
        return CredentialsRefusedError(
            f"{context}: the token endpoint{where} refused {who} ({exc}); fix: check the service "
            "principal's client_id and client_secret",
            client_id=client_id,
            token_url=token_url,
        )
    return error


def _is_non_retriable(exc: BaseException) -> bool:
    """An SDK ``NonRetriableException`` (by name: the SDK is imported only where a stream is opened)."""
    return any(cls.__name__ == "NonRetriableException" for cls in type(exc).__mro__)


def _mismatch(table: str, stream_id: str, batch: pa.Schema, stream: pa.Schema) -> SchemaRejectedError | None:
    """Why ``batch`` cannot go on a stream opened with ``stream`` (None: it can, maybe relabelled)."""
    if batch.names != stream.names:
        missing = [n for n in stream.names if n not in batch.names]
        extra = [n for n in batch.names if n not in stream.names]
        causes = ["MISSING_REQUIRED_COLUMN"] if missing else []
        causes += ["FIELD_NOT_IN_TABLE"] if extra else []
        detail = f"missing columns {missing}, unexpected columns {extra}"
        if not causes:
            causes, detail = ["FIELD_OUT_OF_ORDER"], f"column order {batch.names}, stream has {stream.names}"
    else:
        wrong = [
            f"{ours.name} is {ours.type}, stream has {theirs.type}"
            for ours, theirs in zip(batch, stream, strict=True)
            if not ours.type.equals(theirs.type)
        ]
        if not wrong:
            return None
        causes, detail = ["TYPE_INCOMPATIBLE"], "; ".join(wrong)
    return SchemaRejectedError(
        f"{table}: batch does not match the schema stream {stream_id} was opened with: {detail}; fix: cast "
        "the batch to the stream schema, or open a new stream for the new schema (nothing was sent)",
        causes=causes,
        code="INVALID_ARGUMENT",
        table=table,
    )


class SdkStream:
    """One official-SDK Arrow stream, shaped as our ``Stream`` protocol."""

    def __init__(
        self,
        table: str,
        inner: Any,
        schema: pa.Schema | None = None,
        *,
        ack_timeout_s: float | None = None,
        max_inflight_batches: int = SdkStreamOptions().max_inflight_batches,
    ) -> None:
        """``ack_timeout_s``: the SDK's lack-of-ack timeout if its recovery is on (None: not inferred).
        ``max_inflight_batches``: the option the SDK stream was opened with."""
        self._table = table
        self._inner = inner
        self._schema = schema
        self._max_inflight_batches = max_inflight_batches
        self._id = uuid.uuid4().hex[:12]
        self._closed = False
        self._close_lock = threading.Lock()
        # Replay watch (module docstring). Offsets are the SDK's logical ones: 0, 1, 2, ... per stream.
        self._watch = threading.Lock()
        self._unacked: dict[int, tuple[int, float]] = {}  # offset -> (rows, submitted at), not seen durable
        self._acked_through = -1
        self._resent_through = -1  # batches up to this offset are already counted as possibly re-sent
        self._first_wait: dict[int, float] = {}  # offset -> start of its first wait not yet returned
        # Slack over the timeout: an ack arriving just before it must not read as a reconnect.
        self._stall_s = None if ack_timeout_s is None else ack_timeout_s + max(0.02 * ack_timeout_s, 0.05)
        self._recoveries = 0
        self._rows_possibly_resent = 0
        self._failure: TransportError | None = None  # why a wait found the stream dead

    @property
    def table(self) -> str:
        return self._table

    @property
    def stream_id(self) -> str:
        return self._id

    @property
    def schema(self) -> pa.Schema | None:
        return self._schema

    @property
    def max_inflight_batches(self) -> int:
        """The SDK's cap on unacknowledged batches: ``ingest_batch`` blocks at it, waiting for an ack
        (measured against 1.10.0; ``transport.base.CapsInFlight``)."""
        return self._max_inflight_batches

    def submit(self, batch: pa.RecordBatch) -> int:
        batch = self._conform(batch)
        try:
            offset = int(self._inner.ingest_batch(batch))
        except Exception as exc:
            context = f"submit to {self._table} (stream {self._id})"
            failure = self._failure
            if isinstance(failure, ConcurrencyRejectedError) and _STREAM_CLOSED in str(exc).lower():
                # The SDK's text here names no cause; the wait that saw the stream die did. A stream whose
                # reconnects were refused must read as a concurrency reject (back off), not as poison.
                raise ConcurrencyRejectedError(
                    f"{context}: the service refused this stream's reconnects ({failure}); nothing was sent",
                    code=failure.code,
                ) from exc
            raise transport_error(exc, context) from exc
        with self._watch:  # taken once queued: a submit held back by the in-flight cap is not pending yet
            self._unacked[offset] = (batch.num_rows, time.monotonic())
        return offset

    @property
    def recoveries(self) -> int:
        """SDK reconnects observed inside this stream (a lower bound without a headers provider)."""
        return self._recoveries

    @property
    def rows_possibly_resent(self) -> int:
        """Rows of batches pending when a reconnect was observed: the SDK replayed them, maybe twice."""
        return self._rows_possibly_resent

    def note_reconnect(self) -> None:
        """One SDK reconnect happened now (called by the per-stream headers provider)."""
        with self._watch:
            self._note_replay_locked()

    def _note_replay_locked(self) -> None:
        self._recoveries += 1
        fresh = [rows for offset, (rows, _) in self._unacked.items() if offset > self._resent_through]
        self._rows_possibly_resent += sum(fresh)
        if self._unacked:
            self._resent_through = max(self._resent_through, *self._unacked)

    def _durable_through(self, offset: int, first_wait: float) -> None:
        """``offset`` was acknowledged just now, after a wait that started at ``first_wait``.

        If the wait blocked, the acknowledgement arrived while it did, so ``offset`` stayed pending
        from its submit until now; longer than the lack-of-ack timeout means the SDK reconnected (the
        oldest pending batch, submitted no later, passed its deadline).
        """
        now = time.monotonic()
        with self._watch:
            entry = self._unacked.get(offset)
            pending_since = first_wait if entry is None else entry[1]
            blocked = now - first_wait > _BLOCKED_S
            if self._stall_s is not None and blocked and now - pending_since > self._stall_s:
                self._note_replay_locked()
            for done in range(self._acked_through + 1, offset + 1):
                self._unacked.pop(done, None)
            self._acked_through = max(self._acked_through, offset)
            for waited in [o for o in self._first_wait if o <= offset]:
                del self._first_wait[waited]

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` labelled with the stream's exact schema, which is all the SDK accepts."""
        stream = self._schema
        if stream is None or batch.schema.equals(stream, check_metadata=True):
            return batch
        problem = _mismatch(self._table, self._id, batch.schema, stream)
        if problem is not None:
            raise problem
        for field, column in zip(stream, batch.columns, strict=True):
            if not field.nullable and column.null_count:
                raise SchemaRejectedError(
                    f"{self._table}: column {field.name} holds {column.null_count} null(s) but stream "
                    f"{self._id} declares it NOT NULL; fix: fill or drop the nulls (nothing was sent)",
                    causes=["NULL_IN_REQUIRED_COLUMN"],
                    code="INVALID_ARGUMENT",
                    table=self._table,
                    column=field.name,
                )
        # Same names and types: only metadata or nullability flags differ. Relabelling copies nothing.
        return pa.RecordBatch.from_arrays(batch.columns, schema=stream)

    def wait_for_offset(self, offset: int) -> None:
        # Measured from the first wait for this offset: a timed-out wait the ack lane retries is one stall.
        with self._watch:
            first_wait = self._first_wait.setdefault(offset, time.monotonic())
        try:
            self._inner.wait_for_offset(offset)
        except Exception as exc:
            context = f"wait for offset {offset} on {self._table} (stream {self._id})"
            error = transport_error(exc, context)
            if error.error_class is not ErrorClass.TRANSIENT and self._failure is None:
                self._failure = error
            raise error from exc
        self._durable_through(offset, first_wait)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except Exception as exc:
            raise transport_error(exc, f"flush {self._table} (stream {self._id})") from exc

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._inner.close()
        except Exception as exc:
            raise transport_error(exc, f"close {self._table} (stream {self._id})") from exc

    def abandon(self) -> None:
        """Close without caring whether the final flush succeeds (the stream already failed)."""
        try:
            self.close()
        except Exception as exc:  # the failure that poisoned the stream was already reported
            log.debug("closing failed stream %s of %s: %s", self._id, self._table, exc)

    def unacked(self) -> list[pa.RecordBatch]:
        """Unacknowledged batches; the SDK only hands them out once the stream is closed."""
        if not self._closed:
            self.abandon()
        try:
            return list(self._inner.get_unacked_batches())
        except Exception as exc:
            raise transport_error(exc, f"unacked batches of {self._table} (stream {self._id})") from exc


_counting_class: type | None = None


def counting_headers_provider(inner: Any) -> Any:
    """A per-stream ``HeadersProvider`` around ``inner`` that reports each connection after the open.

    The SDK asks for headers on every connection attempt, reconnects included (measured against
    1.10.0), so once ``on_connect`` is set, each call is one reconnect of that stream.
    """
    global _counting_class
    if _counting_class is None:
        from zerobus.sdk.shared import HeadersProvider

        class CountingHeadersProvider(HeadersProvider):  # type: ignore[misc]
            def __init__(self, wrapped: Any) -> None:
                super().__init__()
                self.wrapped = wrapped
                self.on_connect: Callable[[], None] | None = None

            def get_headers(self) -> list[tuple[str, str]]:
                if self.on_connect is not None:
                    self.on_connect()
                return list(self.wrapped.get_headers())

            def invalidate(self) -> None:
                hook = getattr(self.wrapped, "invalidate", None)
                if callable(hook):
                    hook()

        _counting_class = CountingHeadersProvider
    return _counting_class(inner)


class SdkTransport:
    """Opens official-SDK Arrow streams against Databricks or the local emulator."""

    def __init__(
        self,
        endpoint: str,
        token_url: str,
        *,
        client_id: str | None = None,
        client_secret: SecretStr | None = None,
        headers_provider: Any | None = None,
        options: SdkStreamOptions | None = None,
    ) -> None:
        if headers_provider is None and (client_id is None or client_secret is None):
            raise ConfigError(
                f"Zerobus endpoint {endpoint}: set client_id and client_secret (OAuth M2M service principal) "
                "or pass a headers_provider"
            )
        if not urlparse(endpoint).scheme:
            # A scheme-less host becomes https:// inside the SDK; say so instead of a TLS error later.
            raise ConfigError(f"Zerobus endpoint {endpoint!r} needs a scheme: https://... (http:// locally)")
        from zerobus.sdk.sync import ZerobusSdk

        bypass_proxy_for_loopback(endpoint)
        bypass_proxy_for_loopback(token_url)
        self._endpoint = endpoint
        self._token_url = token_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._headers_provider = headers_provider
        self._options = options or SdkStreamOptions()
        self._sdk = ZerobusSdk(endpoint, token_url, application_name=APPLICATION_NAME)

    @classmethod
    def from_config(
        cls, cfg: ZerobusConfig, *, endpoint: str | None = None, token_url: str | None = None
    ) -> SdkTransport:
        """Remote config as-is; for the embedded emulator pass its endpoint and token URL."""
        resolved_endpoint = endpoint or cfg.endpoint
        resolved_token_url = token_url or cfg.workspace_url
        if resolved_endpoint is None or resolved_token_url is None:
            raise ConfigError("zerobus.endpoint and zerobus.workspace_url are required for the SDK transport")
        client_id, client_secret = cfg.client_id, cfg.client_secret
        if cfg.embedded:
            client_id, client_secret = cfg.emulator.client_id, cfg.emulator.client_secret
        return cls(
            resolved_endpoint,
            resolved_token_url,
            client_id=client_id,
            client_secret=client_secret,
            options=cfg.sdk,
        )

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def open_stream(self, table: str, schema: pa.Schema) -> SdkStream:
        options = arrow_stream_options(self._options)
        counting: Any | None = None
        try:
            if self._headers_provider is not None:
                counting = counting_headers_provider(self._headers_provider)
                inner = self._sdk.create_arrow_stream_with_headers_provider(table, schema, counting, options)
            else:
                assert self._client_id is not None and self._client_secret is not None
                inner = self._sdk.create_arrow_stream(
                    table, schema, self._client_id, self._client_secret.get_secret_value(), options
                )
        except Exception as exc:
            raise transport_error(
                exc, f"open stream for {table}", client_id=self._client_id, token_url=self._token_url
            ) from exc
        sdk_options = self._options
        # A counted provider sees every reconnect, stalls included: inferring them too would count twice.
        infer = sdk_options.recovery and counting is None
        ack_timeout_s = sdk_options.server_lack_of_ack_timeout_ms / 1000 if infer else None
        stream = SdkStream(
            table,
            inner,
            schema,
            ack_timeout_s=ack_timeout_s,
            max_inflight_batches=sdk_options.max_inflight_batches,
        )
        if counting is not None:
            counting.on_connect = stream.note_reconnect  # calls so far were the open's own attempts
        return stream

    def close(self) -> None:
        """Streams own their connections (Arrow streams never share one); nothing transport-wide to free."""
