"""One pool member's state machine: a slot that owns at most one stream and its ack lane at a time.

States: OPENING (waits for its first stream) -> HEALTHY (serves) -> REBUILDING (its stream failed or the
schema changed; the supervisor retires the old lane and opens a new stream) -> HEALTHY again, or FAILED
(beyond repair; a member failed for a cause a retry can fix is re-opened after a cool-down, back to
OPENING). CLOSED when the pool closes.

The transitions are methods and take the time as an argument, so they are tested without threads or
clocks. They do no I/O and never block: the pool and its supervisor hold ``lock`` around them and
do the opening, submitting, settling and logging themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from zerobus_orchestration.sink.ack_lane import LaneState
from zerobus_orchestration.sink.confirmation import PendingAck

if TYPE_CHECKING:
    import pyarrow as pa

    from zerobus_orchestration.sink.ack_lane import AckLane
    from zerobus_orchestration.sink.byte_budget import Share
    from zerobus_orchestration.transport.base import Stream


class MemberState(StrEnum):
    OPENING = "opening"
    HEALTHY = "healthy"
    REBUILDING = "rebuilding"
    FAILED = "failed"
    CLOSED = "closed"


class RetiredLane(Protocol):
    """What a member keeps of a lane it retires: the lane's lifetime counters."""

    @property
    def delivered(self) -> int: ...
    @property
    def rows_delivered(self) -> int: ...
    @property
    def retries(self) -> int: ...
    @property
    def recoveries(self) -> int: ...
    @property
    def rows_possibly_resent(self) -> int: ...
    @property
    def confirm_errors(self) -> int: ...
    @property
    def last_confirm_error(self) -> str | None: ...


@dataclass
class Member:
    """A pool slot. Every transition runs with ``lock`` held by the caller (tests call them directly)."""

    index: int
    state: MemberState = MemberState.OPENING
    stream: Stream | None = None
    lane: AckLane | None = None
    next_seq: int = 0
    delivered_base: int = 0
    rows_delivered_base: int = 0
    rebuilds: int = 0
    retries_base: int = 0
    recoveries_base: int = 0
    resent_base: int = 0
    """SDK reconnects and rows possibly re-sent seen by this member's retired lanes."""
    resubmitted_rows: int = 0
    """Rows of unacknowledged batches re-submitted on a rebuilt stream: the service may have made them
    durable on the dead one without acknowledging them, so they may be in the table twice."""
    confirm_errors_base: int = 0
    last_confirm_error: str | None = None
    failed_batches: int = 0
    abandoned_seqs: int = 0
    """Seqs skipped by re-opens after failures: their batches failed (``failed_batches``), never delivered."""
    reopens: int = 0
    reopen_at: float | None = None
    """When a failed member with a non-fatal cause is re-opened; None while not failed or failed for good."""
    stream_schema: pa.Schema | None = None
    """The exact schema ``stream`` was opened with (the service refuses batches of any other)."""
    rebuild_started: float | None = None
    fatal: BaseException | None = None
    last_loss: BaseException | None = None
    """Why batches of this member were last given up (for ``DeliveryFailedError``); kept after a re-open."""
    barren_failures: int = 0
    """Consecutive streams of this member that failed before confirming anything (drives its backoff)."""
    open_not_before: float = 0.0
    """The member's next stream is not opened before this (``time.monotonic()``)."""
    counts_as_rebuild: bool = False
    share: Share | None = None
    """This member's share of the pool's in-flight byte budget (kept across its streams: a re-submitted
    batch keeps its bytes here until it settles)."""
    resubmit: list[PendingAck] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- counters over the member's life (the live lane's plus its retired lanes') ---------------------

    @property
    def delivered(self) -> int:
        return self.lane.delivered if self.lane is not None else self.delivered_base

    @property
    def rows_delivered(self) -> int:
        lane_rows = self.lane.rows_delivered if self.lane is not None else 0
        return self.rows_delivered_base + lane_rows

    @property
    def recoveries(self) -> int:
        return self.recoveries_base + (self.lane.recoveries if self.lane is not None else 0)

    @property
    def rows_possibly_resent(self) -> int:
        lane = self.lane.rows_possibly_resent if self.lane is not None else 0
        return self.resent_base + self.resubmitted_rows + lane

    @property
    def retries(self) -> int:
        return self.retries_base + (self.lane.retries if self.lane is not None else 0)

    @property
    def confirm_errors(self) -> int:
        return self.confirm_errors_base + (self.lane.confirm_errors if self.lane is not None else 0)

    # -- predicates -----------------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """Healthy and its lane still accepts (a lane that just failed is not yet marked rebuilding)."""
        lane = self.lane
        return self.state is MemberState.HEALTHY and lane is not None and lane.state is LaneState.RUNNING

    @property
    def alive(self) -> bool:
        """Serving on a lane whose thread is running (what health reports as alive)."""
        return self.state is MemberState.HEALTHY and self.lane is not None and self.lane.alive

    @property
    def rebuilding(self) -> bool:
        return self.state is MemberState.REBUILDING

    @property
    def failed(self) -> bool:
        return self.state is MemberState.FAILED

    def reopen_in_s(self, now: float) -> float | None:
        """Failed and waiting out its cool-down: seconds until it is re-opened; else None."""
        if self.state is not MemberState.FAILED or self.reopen_at is None:
            return None
        return max(0.0, self.reopen_at - now)

    @property
    def failed_for_good(self) -> bool:
        """Failed for a cause a retry cannot fix (never re-opened)."""
        return self.state is MemberState.FAILED and self.reopen_at is None

    def rebuild_due(self, now: float) -> bool:
        # An old lane still to retire is always due: retiring collects its batches and sets the backoff.
        return self.state is MemberState.REBUILDING and (self.lane is not None or now >= self.open_not_before)

    def reopen_due(self, now: float) -> bool:
        return self.state is MemberState.FAILED and self.reopen_at is not None and now >= self.reopen_at

    def needs_supervisor(self, now: float, *, closing: bool) -> bool:
        """The supervisor has work on this member now (open, rebuild or re-open)."""
        if self.rebuild_due(now):
            return True
        if closing:
            return False
        return self.state is MemberState.OPENING or self.reopen_due(now)

    # -- transitions ----------------------------------------------------------------------------------

    def take_seq(self) -> int:
        """The next member-lifetime sequence number, for a batch just submitted on this member's stream."""
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def start_rebuild(self, now: float) -> bool:
        """HEALTHY -> REBUILDING because its stream failed (counted as a rebuild once it serves again)."""
        if self.state is not MemberState.HEALTHY:
            return False
        self.state = MemberState.REBUILDING
        self.rebuild_started = now
        self.counts_as_rebuild = True
        return True

    def start_reopen(self, now: float) -> bool:
        """HEALTHY -> REBUILDING to drain and re-open with a new schema (not counted as a rebuild)."""
        if self.state is not MemberState.HEALTHY:
            return False
        self.state = MemberState.REBUILDING
        self.rebuild_started = now
        self.counts_as_rebuild = False
        return True

    def attach(self, stream: Stream, lane: AckLane, schema: pa.Schema) -> list[PendingAck]:
        """Take a freshly opened ``stream`` and its lane; returns the batches to re-submit on it, in order."""
        pending, self.resubmit = self.resubmit, []
        self.stream, self.lane, self.stream_schema = stream, lane, schema
        return pending

    def resubmit_refused(self, unsent: list[PendingAck]) -> None:
        """A re-submit on the new stream failed: keep ``unsent`` (in order) and rebuild again."""
        self.resubmit = unsent
        self.state = MemberState.REBUILDING

    def serve(self) -> bool:
        """-> HEALTHY once every re-submit is on the new stream; True if this completed a counted rebuild."""
        rebuilt = self.state is MemberState.REBUILDING and self.counts_as_rebuild
        self.state = MemberState.HEALTHY
        self.rebuild_started = None
        if rebuilt:
            self.rebuilds += 1
        return rebuilt

    def fail(self, error: BaseException, *, reopen_at: float | None) -> list[PendingAck]:
        """-> FAILED; returns the batches waiting for a re-submit, which the caller settles with ``error``.

        ``reopen_at``: when to re-open (a cause a retry can fix), or None to stay failed for good.
        """
        pending, self.resubmit = self.resubmit, []
        self.state = MemberState.FAILED
        self.fatal = error
        self.failed_batches += len(pending)
        if pending:
            self.last_loss = error
        self.reopen_at = reopen_at
        return pending

    def reopen(self, now: float) -> bool:
        """FAILED (recoverable) -> OPENING: a fresh member, opened like at the first write.

        Its lost batches stay lost (``failed_batches`` keeps them as history); their seqs are skipped so
        they never show as pending. The rebuild budget runs again from ``now``.
        """
        if self.state is not MemberState.FAILED or self.reopen_at is None:
            return False
        self.abandoned_seqs += self.next_seq - self.delivered_base
        self.delivered_base = self.next_seq
        self.state = MemberState.OPENING
        self.fatal = None
        self.reopen_at = None
        self.reopens += 1
        self.rebuild_started = now
        self.counts_as_rebuild = False
        return True

    def retire(self, lane: RetiredLane, unconfirmed: list[PendingAck]) -> None:
        """Let go of the stopped ``lane`` and its stream, keeping its counters and its unconfirmed batches."""
        self.delivered_base = lane.delivered
        self.rows_delivered_base += lane.rows_delivered
        self.retries_base += lane.retries
        self.recoveries_base += lane.recoveries
        self.resent_base += lane.rows_possibly_resent
        self.confirm_errors_base += lane.confirm_errors
        self.last_confirm_error = lane.last_confirm_error or self.last_confirm_error
        self.resubmit = sorted([*self.resubmit, *unconfirmed], key=lambda item: item.seq)
        self.lane = None
        self.stream = None

    def pace_rebuild(self, *, barren: bool, now: float, delay: Callable[[int], float]) -> float | None:
        """After a stream failed: when the next one may open. Returns the wait, or None for at once.

        A stream that dies at once on every rebuild would otherwise be re-opened in a tight loop. The
        first failure after a delivering stream rebuilds at once; from the second barren failure in a row
        on, the member waits ``delay(barren_failures - 1)``.
        """
        self.barren_failures = self.barren_failures + 1 if barren else 0
        if self.barren_failures < 2:
            self.open_not_before = 0.0
            return None
        wait = delay(self.barren_failures - 1)
        self.open_not_before = now + wait
        return wait

    def drop_rejected(self, *, now: float, max_poisonings: int, budget_s: float) -> list[PendingAck]:
        """Take out of ``resubmit`` the batches the service rejected too often to send again.

        A batch is given up once ``max_poisonings`` streams died at it, or ``budget_s`` passed since the
        first did: re-sending it would only kill the next stream too. Their seqs count as abandoned.
        """

        def rejected(item: PendingAck) -> bool:
            if item.first_poisoned_at is None:
                return False
            return item.poisonings >= max_poisonings or now - item.first_poisoned_at >= budget_s

        dropped = [item for item in self.resubmit if rejected(item)]
        if not dropped:
            return []
        self.resubmit = [item for item in self.resubmit if not rejected(item)]
        self.failed_batches += len(dropped)
        self.abandoned_seqs += len(dropped)
        if not self.resubmit and self.lane is None:
            # Nothing older is left to confirm, so the seq high-water can pass the given-up batches
            # (no new batch reaches a member while it is rebuilding).
            self.delivered_base = max(self.delivered_base, self.next_seq)
        return dropped

    def close(self) -> tuple[AckLane | None, Stream | None]:
        """-> CLOSED (a FAILED member stays FAILED); returns the lane and stream for the caller to stop."""
        if self.state is not MemberState.FAILED:
            self.state = MemberState.CLOSED
        return self.lane, self.stream
