"""A pool's budget of unacknowledged bytes: the byte side of push's single backpressure point.

Counts alone (``ack_channel_capacity`` batches per stream) do not bound memory: with large batches and a
service slower than the client, thousands of unacknowledged batches pile up. A pusher ``acquire``s the
batch's bytes before submitting it and waits while the budget is spent; the bytes come back through
``PendingAck.settle``, exactly once per batch, whether it was confirmed durable or given up on, so a
failure can never leave a pusher waiting forever. The ack itself stays asynchronous: the pusher waits
for *some* earlier batch to settle, never for its own.

A batch larger than the whole budget is admitted once nothing else is in flight, rather than never.
"""

from __future__ import annotations

import threading

from zerobus_orchestration.errors import SinkClosedError


class ByteBudget:
    """Bytes submitted and not yet settled, bounded by ``limit``. Thread-safe."""

    def __init__(self, limit: int, *, table: str = "") -> None:
        if limit < 1:
            raise ValueError(f"{table}: the in-flight byte budget must be >= 1, got {limit}")
        self.limit = limit
        self._table = table
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.waits = 0  # acquires that had to wait for bytes to be released
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Pushers waiting right now for bytes to be released."""
        return self._waiting

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def acquire(self, nbytes: int) -> None:
        """Take ``nbytes``, waiting while they do not fit. Raises ``SinkClosedError`` once closed."""
        with self._cond:
            waited = False
            # ``_in_flight > 0``: an oversized batch still goes through, alone.
            while self._in_flight > 0 and self._in_flight + nbytes > self.limit:
                if self._closed:
                    break
                if not waited:
                    waited = True
                    self.waits += 1
                self._waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiting -= 1
            if self._closed:
                raise SinkClosedError(f"{self._table}: the stream pool is closed")
            self._in_flight += nbytes

    def release(self, nbytes: int) -> None:
        with self._cond:
            self._in_flight = max(0, self._in_flight - nbytes)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting pusher with ``SinkClosedError`` (the pool closed; nothing more settles)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
