"""A plain snapshot of pool liveness and delivery, rendered by Dagster metadata and Airflow logs alike.

``pool_health`` renders it from the pool's members; the values are frozen, so a snapshot can be logged
or serialised (``as_dict``) after the pool moved on.

Percentiles come from a bounded in-memory reservoir filled by the ack lanes, so taking a snapshot
costs nothing on the ingest path and memory does not grow with the run.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zerobus_orchestration.sink.member import Member


class SampleReservoir:
    """The last ``size`` samples, thread-safe; enough for p50/p99 of a live pool."""

    def __init__(self, size: int = 4096) -> None:
        self._samples: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, value: float) -> None:
        with self._lock:
            self._samples.append(value)

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile, ``q`` in [0, 100]; None before the first sample."""
        with self._lock:
            ordered = sorted(self._samples)
        if not ordered:
            return None
        rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
        return ordered[rank]

    def mean(self) -> float | None:
        with self._lock:
            return sum(self._samples) / len(self._samples) if self._samples else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)


@dataclass(frozen=True)
class StreamHealth:
    index: int
    stream_id: str | None
    alive: bool
    rebuilding: bool
    failed: bool
    pending: int
    backpressured: bool
    submitted: int
    delivered: int
    rebuilds: int
    reopens: int = 0
    """Times this member was re-opened after failing beyond repair for a non-fatal cause."""
    recoveries: int = 0
    """Reconnects the SDK made inside this member's streams (each replayed its unacknowledged batches)."""
    reopen_in_s: float | None = None
    """Failed, waiting out its cool-down: seconds until it is re-opened (None if not, or failed for good)."""
    inflight_bytes: int = 0
    """Bytes submitted on this stream and not yet settled (re-submits after a rebuild included)."""
    inflight_bytes_limit: int = 0
    """This stream's share of ``pool.max_inflight_bytes``."""
    budget_waiting: int = 0
    """Pushers pinned to this stream by an ordering key, waiting right now for its share to have room."""


@dataclass(frozen=True)
class PoolHealth:
    table: str
    lane: str
    size: int
    alive: int
    rebuilding: int
    submitted: int
    delivered: int
    pending: int
    failed_batches: int
    rows_delivered: int
    rebuilds: int
    concurrency_rejects: int
    ack_retries: int
    poisoned: int
    """Ack lanes stopped by a poisoned stream (error class POISON): "our stream died"."""
    coalesce_ratio_p50: float | None
    coalesce_ratio_mean: float | None
    delivery_latency_p50_s: float | None
    delivery_latency_p99_s: float | None
    closed: bool
    streams: tuple[StreamHealth, ...]
    reopens: int = 0
    """Members re-opened after failing beyond repair (their lost batches stay in ``failed_batches``)."""
    supervisor_errors: int = 0
    """Unexpected errors the pool's supervisor logged and survived (each one is in the log)."""
    recoveries: int = 0
    """Reconnects the SDK made inside a stream (lack-of-ack timeout, rotation, retryable failure), as far
    as the transport can observe them; ``rebuilds`` are ours, these are the SDK's own."""
    rows_possibly_resent: int = 0
    """Rows pending on a stream when the SDK reconnected it: replayed, so they may have landed twice."""
    last_supervisor_error: str | None = None
    lane_failures: int = 0
    """Ack lanes stopped for any cause: poisoned, transient retries exhausted, or fatal."""
    confirm_errors: int = 0
    """Batches acknowledged durable whose coverage range could not be recorded (each one is in the log).

    Their rows landed, but coverage does not know it: a resumed write sends them again."""
    inflight_bytes: int = 0
    """Bytes submitted and not yet settled, across the pool; push waits at ``pool.max_inflight_bytes``."""
    inflight_bytes_limit: int = 0
    """The pool's byte budget, ``pool.max_inflight_bytes`` (per table, whatever the number of streams),
    split into one share per stream (``StreamHealth.inflight_bytes_limit``)."""
    budget_waiting: int = 0
    """Pushers waiting right now for in-flight bytes to be acknowledged (the byte budget binds): pinned
    to one stream's share (``StreamHealth.budget_waiting``), or free to take any and every share spent."""
    budget_waits: int = 0
    """Pushes that waited on the byte budget, over the pool's life."""
    budget_wait_s: float = 0.0
    """Seconds pushers spent waiting on the byte budget, summed over pushers, over the pool's life."""
    backpressured: bool = False
    """A pusher waits right now, on the byte budget or on a full ack channel (see ``backpressure``)."""
    backpressure: str | None = None
    """Which point holds pushers now, named by the setting that bounds it: ``"max_inflight_bytes"``,
    ``"ack_channel_capacity"``, ``"max_inflight_bytes+ack_channel_capacity"`` (several pushers, held at
    both), or None. docs/runbook.md#backpressure says what to do for each."""

    @property
    def healthy(self) -> bool:
        return self.alive > 0 and self.failed_batches == 0 and self.confirm_errors == 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["streams"] = [asdict(s) for s in self.streams]
        data["healthy"] = self.healthy
        return data


@dataclass(frozen=True)
class BudgetFigures:
    """What the pool's byte budget (``byte_budget.ByteBudget``) reports, read without its lock."""

    in_flight: int = 0
    limit: int = 0
    waiting: int = 0
    waits: int = 0
    wait_s: float = 0.0


def stream_health(member: Member, now: float) -> StreamHealth:
    """One member's snapshot. Seqs skipped by re-opens are neither delivered nor pending."""
    lane, share = member.lane, member.share
    submitted = member.next_seq
    delivered = member.delivered - member.abandoned_seqs
    return StreamHealth(
        index=member.index,
        stream_id=member.stream.stream_id if member.stream is not None else None,
        alive=member.alive,
        rebuilding=member.rebuilding,
        failed=member.failed,
        pending=submitted - delivered - member.abandoned_seqs,
        backpressured=lane.backpressured if lane is not None else False,
        submitted=submitted,
        delivered=delivered,
        rebuilds=member.rebuilds,
        recoveries=member.recoveries,
        reopens=member.reopens,
        reopen_in_s=member.reopen_in_s(now),
        inflight_bytes=share.in_flight if share is not None else 0,
        inflight_bytes_limit=share.limit if share is not None else 0,
        budget_waiting=share.waiting if share is not None else 0,
    )


def pool_health(
    *,
    table: str,
    lane: str,
    members: Sequence[Member],
    coalesce: SampleReservoir,
    latency: SampleReservoir,
    concurrency_rejects: int,
    poisoned: int,
    lane_failures: int,
    supervisor_errors: int,
    last_supervisor_error: str | None,
    closed: bool,
    now: float,
    budget: BudgetFigures | None = None,
) -> PoolHealth:
    """A pool's snapshot from its members and the pool-wide counters (``StreamPool.health``)."""
    streams = tuple(stream_health(m, now) for m in members)
    budget = budget if budget is not None else BudgetFigures()
    points = [
        name
        for name, held in (
            ("max_inflight_bytes", budget.waiting > 0),
            ("ack_channel_capacity", any(s.backpressured for s in streams)),
        )
        if held
    ]
    return PoolHealth(
        table=table,
        lane=lane,
        size=len(members),
        alive=sum(1 for s in streams if s.alive),
        rebuilding=sum(1 for s in streams if s.rebuilding),
        submitted=sum(s.submitted for s in streams),
        delivered=sum(s.delivered for s in streams),
        pending=sum(s.pending for s in streams),
        failed_batches=sum(m.failed_batches for m in members),
        rows_delivered=sum(m.rows_delivered for m in members),
        rebuilds=sum(m.rebuilds for m in members),
        recoveries=sum(m.recoveries for m in members),
        rows_possibly_resent=sum(m.rows_possibly_resent for m in members),
        reopens=sum(m.reopens for m in members),
        concurrency_rejects=concurrency_rejects,
        ack_retries=sum(m.retries for m in members),
        poisoned=poisoned,
        lane_failures=lane_failures,
        coalesce_ratio_p50=coalesce.percentile(50),
        coalesce_ratio_mean=coalesce.mean(),
        delivery_latency_p50_s=latency.percentile(50),
        delivery_latency_p99_s=latency.percentile(99),
        closed=closed,
        streams=streams,
        supervisor_errors=supervisor_errors,
        last_supervisor_error=last_supervisor_error,
        confirm_errors=sum(m.confirm_errors for m in members),
        inflight_bytes=budget.in_flight,
        inflight_bytes_limit=budget.limit,
        budget_waiting=budget.waiting,
        budget_waits=budget.waits,
        budget_wait_s=budget.wait_s,
        backpressured=bool(points),
        backpressure="+".join(points) or None,
    )
