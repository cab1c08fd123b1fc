"""A pool's budget of unacknowledged bytes, one share per stream: the byte side of push's backpressure.

Counts alone (``ack_channel_capacity`` batches per stream) do not bound memory: with large batches and a
service slower than the client, thousands of unacknowledged batches pile up. A pusher ``acquire``s the
batch's bytes before submitting it and waits while they do not fit; the bytes come back through
``PendingAck.settle``, exactly once per batch, whether it was confirmed durable or given up on, so a
failure can never leave a pusher waiting forever. The ack itself stays asynchronous: the pusher waits
for *some* earlier batch to settle, never for its own.

The table's budget (``pool.max_inflight_bytes``) is split into one ``Share`` per pool member, so a slow
stream can spend only its own share: its unacknowledged bytes hold back the batches pinned to it by an
ordering key (``acquire_on``), never the others, which ``acquire_any`` sends to whichever stream has
room. The shares sum to the limit, so the total still bounds memory. A batch larger than a whole share
is admitted once nothing else is in flight on that share, rather than never (the configuration warns
when a share is smaller than ``pool.max_batch_bytes``).

All shares wait on one condition, so a pusher waiting for any share is woken by any release. Waits are
counted (how many, and for how long) only on the waiting path, where the pusher is about to block
anyway: an ``acquire`` that fits takes the lock it always took and nothing more. The time waited is
added in slices of at most ``_WAIT_SLICE_S``, so a pusher held for minutes shows in ``wait_s`` (and
``zerobus_inflight_budget_wait_seconds_total``) while it waits, not only once it is let through: on the
share's own ``stream`` label for a pinned push, on ``stream="any"`` (``ANY_STREAM``) for a push that
waited because every stream's share was spent. ``health()`` and docs/runbook.md read these to tell this
point from a full ack channel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from zerobus_orchestration.errors import SinkClosedError

_WAIT_SLICE_S = 1.0
"""A waiting pusher wakes this often to account its time waited (it re-checks the budget and waits on)."""

ANY_STREAM = "any"
"""The ``stream`` label of waits by pushes free to go to any stream (no ordering key)."""


class Incrementable(Protocol):
    """A counter child (``prometheus_client``), or anything else that adds up."""

    def inc(self, amount: float = 1) -> None: ...


WaitCounters = Callable[[str], tuple[Incrementable | None, Incrementable | None]]
"""``stream`` label -> (waits counter, wait-seconds counter) for waits on that share (or ``ANY_STREAM``)."""


class _Waits:
    """How often, and how long, pushers waited at one point (a share, or any share)."""

    def __init__(self, counters: tuple[Incrementable | None, Incrementable | None]) -> None:
        self.waits = 0
        self.wait_s = 0.0
        self.waiting = 0
        self._waits_counter, self._seconds_counter = counters

    def started(self) -> None:
        self.waits += 1
        self.waiting += 1
        if self._waits_counter is not None:
            self._waits_counter.inc()  # at the start: a pusher held for good shows at once

    def account(self, seconds: float) -> None:
        self.wait_s += seconds
        if self._seconds_counter is not None:
            self._seconds_counter.inc(seconds)


class Share:
    """One stream's share of its pool's budget; what a ``PendingAck`` gives its bytes back to."""

    def __init__(self, budget: ByteBudget, index: int, limit: int, waits: _Waits) -> None:
        self.index = index
        self.limit = limit
        self._budget = budget
        self._waits = waits
        self.in_flight = 0

    @property
    def waiting(self) -> int:
        """Pushers pinned to this share waiting right now for its bytes to be released."""
        return self._waits.waiting

    @property
    def waits(self) -> int:
        return self._waits.waits

    @property
    def wait_s(self) -> float:
        return self._waits.wait_s

    def fits(self, nbytes: int) -> bool:
        """``nbytes`` fit now (an oversized batch fits an empty share); a hint unless under the lock."""
        return self.in_flight == 0 or self.in_flight + nbytes <= self.limit

    def release(self, nbytes: int) -> None:
        self._budget.release(nbytes, self.index)


class ByteBudget:
    """Bytes submitted and not yet settled, per stream share, bounded by ``limit`` in all. Thread-safe."""

    def __init__(
        self,
        limit: int,
        shares: int = 1,
        *,
        table: str = "",
        counters: WaitCounters | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"{table}: the in-flight byte budget must be >= 1, got {limit}")
        if shares < 1:
            raise ValueError(f"{table}: the in-flight byte budget needs >= 1 share, got {shares}")
        self.limit = limit
        self._table = table
        self._cond = threading.Condition()
        self._closed = False
        count: WaitCounters = counters or (lambda _stream: (None, None))
        # The remainder goes to the first shares, so the shares sum to ``limit`` exactly.
        base, extra = divmod(limit, shares)
        self.shares = tuple(
            Share(self, i, max(1, base + (1 if i < extra else 0)), _Waits(count(str(i))))
            for i in range(shares)
        )
        self._any = _Waits(count(ANY_STREAM))

    # -- figures (read without the lock: a snapshot) -----------------------------------------------

    @property
    def in_flight(self) -> int:
        return sum(share.in_flight for share in self.shares)

    @property
    def waiting(self) -> int:
        """Pushers waiting right now for bytes to be released (pinned to a share, or for any)."""
        return self._any.waiting + sum(share.waiting for share in self.shares)

    @property
    def waits(self) -> int:
        """Acquires that had to wait for bytes to be released, over the budget's life."""
        return self._any.waits + sum(share.waits for share in self.shares)

    @property
    def wait_s(self) -> float:
        """Seconds pushers spent waiting here, summed over pushers."""
        return self._any.wait_s + sum(share.wait_s for share in self.shares)

    # -- taking and giving back ---------------------------------------------------------------------

    def acquire(self, nbytes: int, share: int = 0) -> Share:
        """Take ``nbytes`` of one share, waiting while they do not fit (a push pinned to its stream).

        Raises ``SinkClosedError`` once closed."""
        target = self.shares[share]
        with self._cond:
            # Inline, not ``_wait_locked``'s loop: this test is all a push that fits pays here.
            if not target.fits(nbytes) and not self._closed:
                self._wait_locked(target._waits, lambda: target.fits(nbytes))
            self._raise_if_closed_locked()
            target.in_flight += nbytes
            return target

    def acquire_any(self, nbytes: int, order: Sequence[int], usable: Callable[[int], bool]) -> Share | None:
        """Take ``nbytes`` of the first share in ``order`` they fit, waiting while none has room.

        ``usable(i)``: share ``i``'s stream can take a batch now (re-checked after every wake: the pool
        wakes the budget, ``wake``, when a stream changes state). None once no share in ``order`` is
        usable: the caller selects again. Raises ``SinkClosedError`` once closed.
        """
        with self._cond:
            chosen = self._first_fit_locked(nbytes, order, usable)
            if chosen is None and not self._closed and any(usable(i) for i in order):
                self._wait_locked(
                    self._any,
                    lambda: (
                        self._first_fit_locked(nbytes, order, usable) is not None
                        or not any(usable(i) for i in order)
                    ),
                )
                chosen = self._first_fit_locked(nbytes, order, usable)
            self._raise_if_closed_locked()
            if chosen is not None:
                chosen.in_flight += nbytes
            return chosen

    def _first_fit_locked(
        self, nbytes: int, order: Sequence[int], usable: Callable[[int], bool]
    ) -> Share | None:
        for index in order:
            share = self.shares[index]
            if share.fits(nbytes) and usable(index):
                return share
        return None

    def _wait_locked(self, waits: _Waits, ready: Callable[[], bool]) -> None:
        """Wait (holding ``_cond``) until ``ready()`` or the budget closes, counting the wait on ``waits``."""
        waits.started()
        mark = time.monotonic()
        try:
            while not ready() and not self._closed:
                self._cond.wait(_WAIT_SLICE_S)
                mark = self._account(waits, mark)
        finally:
            self._account(waits, mark)
            waits.waiting -= 1

    @staticmethod
    def _account(waits: _Waits, since: float) -> float:
        now = time.monotonic()
        waits.account(now - since)
        return now

    def _raise_if_closed_locked(self) -> None:
        if self._closed:
            raise SinkClosedError(f"{self._table}: the stream pool is closed")

    def release(self, nbytes: int, share: int = 0) -> None:
        target = self.shares[share]
        with self._cond:
            target.in_flight = max(0, target.in_flight - nbytes)
            self._cond.notify_all()

    def wake(self) -> None:
        """Let pushers waiting for any share look again (a stream became usable, or stopped being)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting pusher with ``SinkClosedError`` (the pool closed; nothing more settles)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
