"""What the ack lane does once a batch is durable, as a typed value rather than a closure.

A stream belongs to one lane kind. A raw lane confirms ``RawAnchor`` ranges (row positions of the
primary raw table); a derived lane confirms ``DerivedCoverage``. Building a ``PendingAck`` that hands
a raw anchor to a derived-lane stream (or the reverse) fails when the value is built, before any
batch is submitted, so the mismatch can never surface as a half-confirmed run.

A coverage confirmation may carry the batch's payload rows (what the caller gave, before stamping).
The ack lane then hashes them (``coverage.digest.rows_digest``) and records the digest with the range, so a
later resume can check that its input still holds those rows at those positions. Hashing runs on the
lane's thread, off the push path, while the burst's acknowledgement is on its way (``hash_ahead``);
the digest is recorded only after the durable ack, with its range.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol, runtime_checkable

import pyarrow as pa

from zerobus_orchestration.coverage.digest import RangeDigest, rows_digest
from zerobus_orchestration.ranges import CoverageKey, CoverageRecorder, OffsetRange
from zerobus_orchestration.sink.byte_budget import Share
from zerobus_orchestration.sink.errors import ConfirmationLaneError

log = logging.getLogger(__name__)


class LaneKind(StrEnum):
    RAW = "raw"
    DERIVED = "derived"


@dataclass(frozen=True)
class _Coverage:
    """Positions ``span`` of ``key``, recorded only after the durable ack.

    ``runs``: when the batch's positions have gaps (a declared offset column, e.g. Kafka offsets), the
    disjoint ranges it really holds; ``span`` is then their envelope and only ``runs`` are recorded.
    ``payload``: the batch's rows as the caller gave them (no reserved columns), hashed into the
    range's content digest when it is recorded; None records no digest. ``order_by``: the declared
    offset column, which orders the rows for hashing.
    """

    key: CoverageKey
    span: OffsetRange
    runs: tuple[OffsetRange, ...] | None = None
    payload: pa.RecordBatch | None = field(default=None, compare=False, repr=False)
    order_by: str | None = field(default=None, compare=False, repr=False)
    # The digest once computed (``hash_ahead``); a function of the immutable payload alone.
    _hashed: list[RangeDigest | None] = field(default_factory=list, init=False, compare=False, repr=False)

    def ranges(self) -> tuple[OffsetRange, ...]:
        """What recording this confirmation adds to coverage."""
        return (self.span,) if self.runs is None else self.runs

    def hash_ahead(self) -> None:
        """Compute the digest now, to be recorded later, after the durable ack (``digest`` returns it).

        The ack lane calls this while the acknowledgement is on its way: the batch was just serialised
        for sending, so its buffers are still in the CPU's cache (measured cheaper than hashing it once
        the ack arrives), and the hashing overlaps the wait instead of delaying the confirmation.
        """
        if not self._hashed:
            self._hashed.append(self._compute_digest())

    def digest(self) -> RangeDigest | None:
        """The content digest of ``payload``, or None without a payload (or when it cannot be hashed)."""
        if self._hashed:
            return self._hashed[0]
        return self._compute_digest()

    def _compute_digest(self) -> RangeDigest | None:
        if self.payload is None or self.payload.num_rows == 0:
            return None
        try:
            value = rows_digest(self.payload, self.order_by)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            # Never fail a durable batch's coverage over its digest: the range is recorded without one
            # and a resume skips it unverified (and says so).
            log.warning(
                "%s %s: no content digest for this range, a resume cannot verify it: %s",
                self.key,
                self.span,
                exc,
            )
            return None
        return RangeDigest(self.key, self.span, self.runs, self.payload.num_rows, value)


@dataclass(frozen=True)
class RawAnchor(_Coverage):
    """Row positions of ``key`` in the primary raw table (confirmed by raw-lane streams only)."""


@dataclass(frozen=True)
class DerivedCoverage(_Coverage):
    """Coverage of a derived table: positions of ``key``, the upstream write it was derived from."""


@dataclass(frozen=True)
class NoConfirm:
    """Nothing to record (e.g. a side table); only the receipt future is resolved."""


Confirmation = RawAnchor | DerivedCoverage | NoConfirm


def check_lane(lane: LaneKind, confirmation: Confirmation) -> None:
    """Raise unless ``confirmation`` belongs on a ``lane`` stream."""
    if isinstance(confirmation, RawAnchor) and lane is not LaneKind.RAW:
        raise ConfirmationLaneError(
            f"a RawAnchor for {confirmation.key} cannot ride a {lane} lane stream; "
            "raw anchors are confirmed only by raw-lane streams (fix: use a raw-role sink for this table)",
            lane=str(lane),
            key=confirmation.key,
        )
    if isinstance(confirmation, DerivedCoverage) and lane is not LaneKind.DERIVED:
        raise ConfirmationLaneError(
            f"a DerivedCoverage for {confirmation.key} cannot ride a {lane} lane stream "
            "(fix: use a derived-role sink for this table)",
            lane=str(lane),
            key=confirmation.key,
        )


class InFlightBatches:
    """How many batches of one writer are submitted and not yet settled (durable, or failed for good).

    A sink's ``flush`` waits on this rather than on the pool going idle: the pool is shared, so a busy
    sibling sink would otherwise keep it from ever returning. A batch is settled exactly once, through
    ``PendingAck.settle``, wherever it ends: confirmed by its lane or failed by the pool.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def add(self) -> None:
        with self._cond:
            self._count += 1

    def settle(self) -> None:
        with self._cond:
            self._count = max(0, self._count - 1)
            if self._count == 0:
                self._cond.notify_all()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight. False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout)


@dataclass(frozen=True, eq=False)
class PendingAck:
    """One submitted batch waiting for its durable acknowledgement.

    ``seq`` numbers batches per pool member for the life of the process (a rebuild re-submits with
    a new stream ``offset`` but the same ``seq``), which is what ``submitted``/``delivered`` count.
    ``batch`` is kept only so a poisoned stream's unacknowledged batches can be re-submitted.
    ``rows`` / ``nbytes`` are measured once, here (``batch.nbytes`` walks every buffer); pass
    ``nbytes`` when the caller already measured it.
    ``poisonings``: how many streams died at this batch (it was their first unacknowledged one), and
    ``first_poisoned_at`` when the first did; the pool stops re-sending a batch the service keeps
    rejecting instead of rebuilding streams for it forever.
    ``tracker``: the in-flight count of the writer that submitted it (see ``InFlightBatches``).
    ``budget``: its stream's share of the pool's in-flight byte budget, given back ``nbytes`` when the
    batch settles.
    """

    lane: LaneKind
    seq: int
    offset: int
    confirmation: Confirmation
    submitted_at: float
    batch: pa.RecordBatch
    future: Future[OffsetRange | None] | None = None
    resubmitted: bool = False
    rows: int = -1
    nbytes: int = -1
    poisonings: int = 0
    first_poisoned_at: float | None = None
    tracker: InFlightBatches | None = None
    budget: Share | None = None

    def __post_init__(self) -> None:
        check_lane(self.lane, self.confirmation)
        if self.rows < 0:
            object.__setattr__(self, "rows", int(self.batch.num_rows))
        if self.nbytes < 0:
            object.__setattr__(self, "nbytes", int(self.batch.nbytes))

    def moved_to(self, offset: int) -> PendingAck:
        """The same pending batch after re-submission on a rebuilt stream at ``offset``."""
        return PendingAck(
            self.lane,
            self.seq,
            offset,
            self.confirmation,
            self.submitted_at,
            self.batch,
            self.future,
            resubmitted=True,
            rows=self.rows,
            nbytes=self.nbytes,
            poisonings=self.poisonings,
            first_poisoned_at=self.first_poisoned_at,
            tracker=self.tracker,
            budget=self.budget,
        )

    def poisoned(self, now: float) -> PendingAck:
        """The same pending batch, blamed for one more stream that died at it."""
        return replace(
            self,
            poisonings=self.poisonings + 1,
            first_poisoned_at=now if self.first_poisoned_at is None else self.first_poisoned_at,
        )

    def settle(self, error: BaseException | None = None, *, give_back: bool = True) -> None:
        """Resolve the receipt (to the span, or with ``error``) and count the batch out of its writer's
        in-flight batches. Call once per batch, when it is confirmed or given up on.

        ``give_back=False``: the caller returns the bytes to the budget itself (``settle_all``)."""
        if self.future is not None and not self.future.done():
            if error is None:
                self.future.set_result(span_of(self.confirmation))
            else:
                self.future.set_exception(error)
        if self.tracker is not None:
            self.tracker.settle()
        if give_back and self.budget is not None:
            self.budget.release(self.nbytes)  # confirmed or given up: either way, a waiting pusher goes on


def settle_all(settled: Iterable[tuple[PendingAck, BaseException | None]]) -> None:
    """``PendingAck.settle`` for a confirmed burst, the bytes given back once per budget at the end.

    One release per burst instead of one per batch: a pusher waiting on the budget is woken once (it
    re-checks and, for most releases, waits again), not once per batch, while the lane holds the GIL.
    """
    returned: dict[int, tuple[Share, int]] = {}
    try:
        for item, error in settled:
            item.settle(error, give_back=False)
            if item.budget is not None:
                budget, nbytes = returned.get(id(item.budget), (item.budget, 0))
                returned[id(item.budget)] = (budget, nbytes + item.nbytes)
    finally:  # whatever happened settling, the bytes of the batches settled so far go back
        for budget, nbytes in returned.values():
            budget.release(nbytes)


def span_of(confirmation: Confirmation) -> OffsetRange | None:
    if isinstance(confirmation, RawAnchor | DerivedCoverage):
        return confirmation.span
    return None


def keeps_digests(recorder: CoverageRecorder | None) -> bool:
    """Whether ``fire_all`` records content digests into ``recorder`` (ask once: a protocol check is slow)."""
    return isinstance(recorder, DigestRecorder)


def hash_ahead(confirmations: Iterable[Confirmation]) -> None:
    """Compute the content digests ``fire_all`` will record, before the ack (``_Coverage.hash_ahead``).

    For a recorder that ``keeps_digests``; nothing is recorded here.
    """
    for confirmation in confirmations:
        if not isinstance(confirmation, NoConfirm):
            confirmation.hash_ahead()


def fire(confirmation: Confirmation, recorder: CoverageRecorder | None) -> None:
    """Record ``confirmation``. Called only by an ack lane, only after the durable acknowledgement."""
    fire_all((confirmation,), recorder)


@runtime_checkable
class DigestRecorder(Protocol):
    """A ``CoverageRecorder`` that also keeps content digests (``coverage.store.CoverageStore``)."""

    def record_delivered(
        self, items: Iterable[tuple[CoverageKey, OffsetRange]], digests: Iterable[RangeDigest]
    ) -> None: ...


def fire_all(confirmations: Sequence[Confirmation], recorder: CoverageRecorder | None) -> None:
    """Record a burst of confirmations with one store call (one transaction), in the order given.

    Called only by an ack lane, only after the burst's durable acknowledgement. A recorder that keeps
    digests gets each range's content digest in the same call (``record_delivered``); others get
    ``record_many``, and no payload is hashed for them.
    """
    if recorder is None:
        return
    recorded = [c for c in confirmations if not isinstance(c, NoConfirm)]
    items = [(c.key, span) for c in recorded for span in c.ranges()]
    if not items:
        return
    if isinstance(recorder, DigestRecorder):
        digests = [d for d in (c.digest() for c in recorded) if d is not None]
        recorder.record_delivered(items, digests)
    else:
        recorder.record_many(items)
