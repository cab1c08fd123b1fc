"""Rendering a pool's health snapshot from its members, without a pool, threads or streams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pyarrow as pa

from zerobus_orchestration.sink.ack_lane import AckLane, LaneState
from zerobus_orchestration.sink.health import SampleReservoir, pool_health, stream_health
from zerobus_orchestration.sink.member import Member
from zerobus_orchestration.transport.base import Stream


@dataclass
class FakeLane:
    state: LaneState = LaneState.RUNNING
    alive: bool = True
    backpressured: bool = False
    delivered: int = 0
    rows_delivered: int = 0
    retries: int = 0
    recoveries: int = 0
    rows_possibly_resent: int = 0
    confirm_errors: int = 0


@dataclass
class FakeStream:
    stream_id: str = "s-1"


def serving(index: int, lane: FakeLane, submitted: int) -> Member:
    member = Member(index, next_seq=submitted)
    member.attach(cast(Stream, FakeStream(f"s-{index}")), cast(AckLane, lane), pa.schema([]))
    member.serve()
    return member


def test_a_serving_member_reports_pending_as_submitted_minus_delivered() -> None:
    health = stream_health(serving(0, FakeLane(delivered=3, backpressured=True), submitted=5), now=0.0)
    assert (health.index, health.stream_id, health.alive, health.rebuilding, health.failed) == (
        0,
        "s-0",
        True,
        False,
        False,
    )
    assert (health.submitted, health.delivered, health.pending) == (5, 3, 2)
    assert health.backpressured and health.reopen_in_s is None


def test_a_reopened_members_abandoned_seqs_are_neither_delivered_nor_pending() -> None:
    member = Member(1, next_seq=5, delivered_base=2)
    member.fail(RuntimeError("refused"), reopen_at=10.0)
    failed = stream_health(member, now=4.0)
    assert failed.failed and not failed.alive and failed.reopen_in_s == 6.0 and failed.stream_id is None
    member.reopen(10.0)
    health = stream_health(member, now=10.0)
    assert (health.submitted, health.delivered, health.pending, health.reopens) == (5, 2, 0, 1)


def test_the_pool_snapshot_sums_its_members_and_carries_the_pool_wide_counters() -> None:
    coalesce, latency = SampleReservoir(), SampleReservoir()
    for ratio in (1.0, 3.0, 5.0):
        coalesce.add(ratio)
    latency.add(0.25)
    up = serving(0, FakeLane(delivered=4, rows_delivered=40, retries=2, confirm_errors=1), submitted=6)
    down = Member(1, failed_batches=2, rebuilds=1)
    down.fail(RuntimeError("PERMISSION_DENIED"), reopen_at=None)
    health = pool_health(
        table="main.t.x",
        lane="raw",
        members=[up, down],
        coalesce=coalesce,
        latency=latency,
        concurrency_rejects=3,
        poisoned=1,
        lane_failures=2,
        supervisor_errors=1,
        last_supervisor_error="RuntimeError: boom",
        closed=False,
        now=0.0,
    )
    assert (health.table, health.lane, health.size, health.alive, health.rebuilding) == (
        "main.t.x",
        "raw",
        2,
        1,
        0,
    )
    assert (health.submitted, health.delivered, health.pending) == (6, 4, 2)
    assert (health.failed_batches, health.rows_delivered, health.rebuilds, health.ack_retries) == (
        2,
        40,
        1,
        2,
    )
    assert (health.concurrency_rejects, health.poisoned, health.lane_failures) == (3, 1, 2)
    assert health.supervisor_errors == 1 and health.last_supervisor_error == "RuntimeError: boom"
    assert health.confirm_errors == 1 and not health.healthy
    assert health.coalesce_ratio_p50 == 3.0 and health.coalesce_ratio_mean == 3.0
    assert health.delivery_latency_p50_s == 0.25 and health.delivery_latency_p99_s == 0.25
    assert [s.failed for s in health.streams] == [False, True]
