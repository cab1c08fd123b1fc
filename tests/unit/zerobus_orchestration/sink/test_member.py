"""Every transition of a pool member's state machine, without threads, streams or clocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pytest

from zerobus_orchestration.sink.ack_lane import AckLane, LaneState
from zerobus_orchestration.sink.confirmation import LaneKind, NoConfirm, PendingAck
from zerobus_orchestration.sink.member import Member, MemberState
from zerobus_orchestration.transport.base import Stream

SCHEMA = pa.schema([("id", pa.int64())])


@dataclass
class FakeLane:
    """The lane attributes a member reads: state, liveness and lifetime counters."""

    state: LaneState = LaneState.RUNNING
    alive: bool = True
    delivered: int = 0
    rows_delivered: int = 0
    retries: int = 0
    recoveries: int = 0
    rows_possibly_resent: int = 0
    confirm_errors: int = 0
    last_confirm_error: str | None = None


def lane(**kwargs: object) -> AckLane:
    return cast(AckLane, FakeLane(**kwargs))  # type: ignore[arg-type]


STREAM = cast(Stream, object())


def item(seq: int, *, poisonings: int = 0, first_poisoned_at: float | None = None) -> PendingAck:
    batch = pa.record_batch([pa.array([seq], pa.int64())], schema=SCHEMA)
    return PendingAck(
        LaneKind.RAW,
        seq,
        seq,
        NoConfirm(),
        0.0,
        batch,
        poisonings=poisonings,
        first_poisoned_at=first_poisoned_at,
    )


def healthy(**fields: object) -> Member:
    member = Member(0, **fields)  # type: ignore[arg-type]
    member.attach(STREAM, lane(), SCHEMA)
    member.serve()
    return member


def test_a_new_member_is_opening_and_wanted_by_the_supervisor_unless_the_pool_closes() -> None:
    member = Member(3)
    assert member.state is MemberState.OPENING
    assert member.needs_supervisor(0.0, closing=False)
    assert not member.needs_supervisor(0.0, closing=True)
    assert not member.serving and not member.alive


def test_take_seq_numbers_batches_for_the_members_life() -> None:
    member = healthy()
    assert [member.take_seq() for _ in range(3)] == [0, 1, 2]
    assert member.next_seq == 3


def test_attach_takes_the_stream_and_hands_back_the_batches_to_resubmit_in_order() -> None:
    member = Member(0, resubmit=[item(0), item(1)])
    new_lane = lane()
    pending = member.attach(STREAM, new_lane, SCHEMA)
    assert [p.seq for p in pending] == [0, 1]
    assert member.resubmit == []
    assert member.stream is STREAM and member.lane is new_lane and member.stream_schema is SCHEMA


def test_serve_from_opening_is_not_a_rebuild_and_makes_the_member_serve() -> None:
    member = Member(0)
    member.attach(STREAM, lane(), SCHEMA)
    assert member.serve() is False
    assert member.state is MemberState.HEALTHY and member.serving and member.alive
    assert member.rebuilds == 0 and member.rebuild_started is None


def test_a_healthy_member_is_not_serving_once_its_lane_stopped() -> None:
    member = Member(0)
    member.attach(STREAM, lane(state=LaneState.FAILED, alive=False), SCHEMA)
    member.serve()
    assert member.state is MemberState.HEALTHY and not member.serving and not member.alive


def test_start_rebuild_moves_only_a_healthy_member_and_counts_the_rebuild_once_it_serves() -> None:
    member = healthy()
    assert member.start_rebuild(5.0) is True
    assert member.state is MemberState.REBUILDING and member.rebuilding
    assert member.rebuild_started == 5.0 and member.counts_as_rebuild
    assert member.start_rebuild(6.0) is False  # already rebuilding: the first failure's time is kept
    assert member.rebuild_started == 5.0
    assert member.serve() is True
    assert member.rebuilds == 1 and member.serving


def test_start_reopen_for_a_new_schema_is_not_counted_as_a_rebuild() -> None:
    member = healthy()
    assert member.start_reopen(2.0) is True
    assert member.state is MemberState.REBUILDING and not member.counts_as_rebuild
    assert member.serve() is False and member.rebuilds == 0
    assert Member(0).start_reopen(2.0) is False  # an opening member opens with the new schema anyway


def test_rebuild_is_due_at_once_with_a_lane_to_retire_else_after_the_members_backoff() -> None:
    member = healthy()
    member.start_rebuild(0.0)
    member.open_not_before = 10.0
    assert member.rebuild_due(1.0)  # the old lane is still attached
    member.retire(FakeLane(), [])
    assert not member.rebuild_due(1.0) and not member.needs_supervisor(1.0, closing=False)
    assert member.rebuild_due(10.0) and member.needs_supervisor(10.0, closing=True)


def test_a_refused_resubmit_keeps_the_unsent_batches_and_rebuilds_again() -> None:
    member = Member(0)
    member.state = MemberState.REBUILDING
    member.attach(STREAM, lane(), SCHEMA)
    member.resubmit_refused([item(1), item(2)])
    assert member.state is MemberState.REBUILDING
    assert [p.seq for p in member.resubmit] == [1, 2]


def test_retire_keeps_the_lanes_counters_and_merges_its_unconfirmed_batches_by_seq() -> None:
    member = healthy(rows_delivered_base=10, retries_base=1, last_confirm_error="old")
    member.resubmit = [item(4)]
    member.start_rebuild(0.0)
    old = FakeLane(
        delivered=4,
        rows_delivered=40,
        retries=2,
        recoveries=3,
        rows_possibly_resent=5,
        confirm_errors=1,
        last_confirm_error=None,
    )
    member.retire(old, [item(6), item(5)])
    assert member.lane is None and member.stream is None
    assert [p.seq for p in member.resubmit] == [4, 5, 6]
    assert member.delivered == 4 and member.rows_delivered == 50 and member.retries == 3
    assert member.recoveries == 3 and member.rows_possibly_resent == 5 and member.confirm_errors == 1
    assert member.last_confirm_error == "old"  # a lane without an error does not erase the last one


def test_fail_for_a_recoverable_cause_returns_the_waiting_batches_and_schedules_a_reopen() -> None:
    member = Member(0, resubmit=[item(0), item(1)])
    error = RuntimeError("refused")
    pending = member.fail(error, reopen_at=30.0)
    assert [p.seq for p in pending] == [0, 1] and member.resubmit == []
    assert member.state is MemberState.FAILED and member.failed
    assert member.fatal is error and member.last_loss is error and member.failed_batches == 2
    assert not member.failed_for_good
    assert member.reopen_in_s(10.0) == 20.0 and member.reopen_in_s(40.0) == 0.0
    assert not member.reopen_due(29.9) and member.reopen_due(30.0)
    assert member.needs_supervisor(30.0, closing=False)
    assert not member.needs_supervisor(30.0, closing=True)


def test_fail_for_good_is_never_reopened_and_without_batches_records_no_loss() -> None:
    member = Member(0)
    assert member.fail(RuntimeError("PERMISSION_DENIED"), reopen_at=None) == []
    assert member.failed_for_good and member.last_loss is None and member.failed_batches == 0
    assert member.reopen_in_s(0.0) is None
    assert not member.reopen_due(1e9)
    assert member.reopen(1.0) is False and member.state is MemberState.FAILED


def test_reopen_turns_a_failed_member_into_a_fresh_one_and_skips_its_lost_seqs() -> None:
    member = healthy()
    for _ in range(5):
        member.take_seq()
    member.start_rebuild(0.0)
    member.retire(FakeLane(delivered=2), [item(2), item(3), item(4)])
    member.fail(RuntimeError("refused"), reopen_at=30.0)
    assert member.reopen(31.0) is True
    assert member.state is MemberState.OPENING and member.fatal is None and member.reopen_at is None
    assert member.reopens == 1 and member.rebuild_started == 31.0 and not member.counts_as_rebuild
    assert member.abandoned_seqs == 3 and member.delivered_base == 5
    assert member.failed_batches == 3  # history stays
    assert healthy().reopen(0.0) is False  # only a failed member re-opens


def test_pace_rebuild_backs_off_from_the_second_barren_failure_in_a_row() -> None:
    member = Member(0)
    asked: list[int] = []

    def delay(n: int) -> float:
        asked.append(n)
        return 2.0 * n

    assert member.pace_rebuild(barren=True, now=100.0, delay=delay) is None
    assert member.barren_failures == 1 and member.open_not_before == 0.0
    assert member.pace_rebuild(barren=True, now=100.0, delay=delay) == 2.0
    assert member.open_not_before == 102.0
    assert member.pace_rebuild(barren=True, now=100.0, delay=delay) == 4.0
    assert asked == [1, 2]
    assert member.pace_rebuild(barren=False, now=200.0, delay=delay) is None  # it delivered: reset
    assert member.barren_failures == 0 and member.open_not_before == 0.0


def test_drop_rejected_gives_up_batches_poisoned_too_often_or_too_long_and_moves_the_high_water() -> None:
    member = Member(0, next_seq=4, delivered_base=1)
    member.resubmit = [
        item(1, poisonings=3, first_poisoned_at=99.0),  # too many streams died at it
        item(2, poisonings=1, first_poisoned_at=40.0),  # first poisoning past the budget
        item(3, poisonings=1, first_poisoned_at=99.0),  # still within both bounds
    ]
    dropped = member.drop_rejected(now=100.0, max_poisonings=3, budget_s=60.0)
    assert [p.seq for p in dropped] == [1, 2]
    assert [p.seq for p in member.resubmit] == [3]
    assert member.failed_batches == 2 and member.abandoned_seqs == 2
    assert member.delivered_base == 1  # an older batch is still to be confirmed
    dropped = member.drop_rejected(now=200.0, max_poisonings=3, budget_s=60.0)
    assert [p.seq for p in dropped] == [3] and member.resubmit == []
    assert member.delivered_base == 4  # nothing older left: the high-water passes the given-up batches


def test_drop_rejected_keeps_batches_never_poisoned() -> None:
    member = Member(0, resubmit=[item(0)])
    assert member.drop_rejected(now=1e9, max_poisonings=1, budget_s=0.0) == []
    assert len(member.resubmit) == 1 and member.failed_batches == 0


@pytest.mark.parametrize(
    ("state", "after"),
    [
        (MemberState.OPENING, MemberState.CLOSED),
        (MemberState.HEALTHY, MemberState.CLOSED),
        (MemberState.REBUILDING, MemberState.CLOSED),
        (MemberState.FAILED, MemberState.FAILED),
    ],
)
def test_close_hands_back_lane_and_stream_and_keeps_a_failed_member_failed(
    state: MemberState, after: MemberState
) -> None:
    member = Member(0)
    attached = lane()
    member.attach(STREAM, attached, SCHEMA)
    member.state = state
    assert member.close() == (attached, STREAM)
    assert member.state is after
