"""The seam between the sink and whatever carries batches: the official SDK or the in-memory fake.

A ``Stream`` is one long-lived Zerobus stream for one table. ``submit`` never waits for durability:
it queues the batch and returns its logical offset (0, 1, 2, ... per stream). Durability is awaited
by the ack lane through ``wait_for_offset``, which is cumulative: once it returns for offset N,
every offset <= N is durable.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class Stream(Protocol):
    @property
    def table(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    def submit(self, batch: pa.RecordBatch) -> int:
        """Queue ``batch`` and return its offset without waiting for the acknowledgement."""
        ...

    def wait_for_offset(self, offset: int) -> None:
        """Block until every offset <= ``offset`` is durable; raise a classified error otherwise."""
        ...

    def flush(self) -> None:
        """Block until everything submitted so far is durable."""
        ...

    def close(self) -> None:
        """Flush, then release the stream. Idempotent."""
        ...

    def unacked(self) -> list[pa.RecordBatch]:
        """Batches submitted but never acknowledged; valid once the stream failed or closed."""
        ...


@runtime_checkable
class Transport(Protocol):
    def open_stream(self, table: str, schema: pa.Schema) -> Stream:
        """Open a new stream for ``table`` (catalog.schema.table) carrying ``schema``.

        Raises ``ConcurrencyRejectedError`` when the service refuses another stream for the table.
        """
        ...

    def close(self) -> None:
        """Release transport-wide resources (channels, token caches). Idempotent."""
        ...


@runtime_checkable
class CapsInFlight(Protocol):
    """A stream whose ``submit`` blocks once this many batches are unacknowledged (the official SDK's
    ``max_inflight_batches``). The pool keeps each stream's pending acks at or under it, so a pusher
    never waits inside the transport while it holds the stream (docs/architecture.md#the-data-path)."""

    @property
    def max_inflight_batches(self) -> int | None:
        """None: no cap."""
        ...
