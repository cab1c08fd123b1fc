"""A pool's budget of unacknowledged bytes: the byte side of push's single backpressure point.

Counts alone (``ack_channel_capacity`` batches per stream) do not bound memory: with large batches and a
service slower than the client, thousands of unacknowledged batches pile up. A pusher ``acquire``s the
batch's bytes before submitting it and waits while the budget is spent; the bytes come back through
``PendingAck.settle``, exactly once per batch, whether it was confirmed durable or given up on, so a
failure can never leave a pusher waiting forever. The ack itself stays asynchronous: the pusher waits
for *some* earlier batch to settle, never for its own.

A batch larger than the whole budget is admitted once nothing else is in flight, rather than never.

Waits are counted (how many, and for how long) only on the waiting path, where the pusher is about to
block anyway: an ``acquire`` that fits takes the lock it always took and nothing more. The time waited
is added in slices of at most ``_WAIT_SLICE_S``, so a pusher held for minutes shows in
``wait_s`` (and ``zerobus_inflight_budget_wait_seconds_total``) while it waits, not only once it is let
through. ``health()`` and docs/runbook.md read these to tell this point from a full ack channel.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from zerobus_orchestration.errors import SinkClosedError

_WAIT_SLICE_S = 1.0
"""A waiting pusher wakes this often to account its time waited (it re-checks the budget and waits on)."""


class Incrementable(Protocol):
    """A counter child (``prometheus_client``), or anything else that adds up."""

    def inc(self, amount: float = 1) -> None: ...


class ByteBudget:
    """Bytes submitted and not yet settled, bounded by ``limit``. Thread-safe."""

    def __init__(
        self,
        limit: int,
        *,
        table: str = "",
        waits_counter: Incrementable | None = None,
        wait_seconds_counter: Incrementable | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"{table}: the in-flight byte budget must be >= 1, got {limit}")
        self.limit = limit
        self._table = table
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.waits = 0  # acquires that had to wait for bytes to be released
        self.wait_s = 0.0  # seconds pushers spent waiting here, summed over pushers
        self._waiting = 0
        self._waits_counter = waits_counter
        self._wait_seconds_counter = wait_seconds_counter

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
            # Inline, not ``_must_wait_locked``: this test is all a push that fits pays here.
            if self._in_flight > 0 and self._in_flight + nbytes > self.limit and not self._closed:
                self._wait_locked(nbytes)
            if self._closed:
                raise SinkClosedError(f"{self._table}: the stream pool is closed")
            self._in_flight += nbytes

    def _must_wait_locked(self, nbytes: int) -> bool:
        # ``_in_flight > 0``: an oversized batch still goes through, alone.
        return self._in_flight > 0 and self._in_flight + nbytes > self.limit and not self._closed

    def _wait_locked(self, nbytes: int) -> None:
        """Wait (holding ``_cond``) until ``nbytes`` fit or the budget closes, counting the wait."""
        self.waits += 1
        self._waiting += 1
        if self._waits_counter is not None:
            self._waits_counter.inc()  # at the start: a pusher held for good shows at once
        mark = time.monotonic()
        try:
            while self._must_wait_locked(nbytes):
                self._cond.wait(_WAIT_SLICE_S)
                mark = self._account_locked(mark)
        finally:
            self._account_locked(mark)
            self._waiting -= 1

    def _account_locked(self, since: float) -> float:
        now = time.monotonic()
        self.wait_s += now - since
        if self._wait_seconds_counter is not None:
            self._wait_seconds_counter.inc(now - since)
        return now

    def release(self, nbytes: int) -> None:
        with self._cond:
            self._in_flight = max(0, self._in_flight - nbytes)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting pusher with ``SinkClosedError`` (the pool closed; nothing more settles)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
