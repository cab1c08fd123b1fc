"""One batch's retry budget at submit, on a fake clock and a fake supervisor (no threads, no sleeps)."""

from __future__ import annotations

from typing import cast

import pytest

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.sink.errors import SubmitFailedError
from zerobus_orchestration.sink.member import Member
from zerobus_orchestration.sink.submit_retry import SubmitRetry
from zerobus_orchestration.sink.supervisor import Supervisor


class FakeSupervisor:
    def __init__(self) -> None:
        self.back_offs: list[tuple[int, str]] = []

    def jittered(self, failures: int) -> float:
        return 0.1 * failures

    def hinted(self, delay: float, error: BaseException) -> float:
        return max(delay, 5.0) if "retry after" in str(error) else delay

    def back_off(self, member: Member, exc: BaseException, error_class: ErrorClass, what: str) -> None:
        self.back_offs.append((member.index, what))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def retry(config: PoolConfig) -> tuple[SubmitRetry, FakeSupervisor, Clock]:
    supervisor, clock = FakeSupervisor(), Clock()
    budget = SubmitRetry(
        "main.t.x", config, cast(Supervisor, supervisor), sleep=clock.sleep, clock=lambda: clock.now
    )
    return budget, supervisor, clock


def test_transient_failures_back_off_growing_then_the_batch_is_refused_naming_table_and_attempts() -> None:
    budget, _, clock = retry(PoolConfig(transient_retries=2))
    member = Member(1)
    budget.after_failure(member, RuntimeError("unavailable"), ErrorClass.TRANSIENT)
    budget.after_failure(member, RuntimeError("unavailable"), ErrorClass.TRANSIENT)
    assert clock.sleeps == [pytest.approx(0.1), pytest.approx(0.2)]
    with pytest.raises(SubmitFailedError, match=r"main\.t\.x: submitting one batch failed 3 time") as info:
        budget.after_failure(member, RuntimeError("unavailable"), ErrorClass.TRANSIENT)
    assert info.value.table == "main.t.x" and info.value.attempts == 3
    assert len(clock.sleeps) == 2  # refused without another wait


def test_a_retry_hint_is_a_floor_on_the_transient_backoff() -> None:
    budget, _, clock = retry(PoolConfig(transient_retries=3))
    budget.after_failure(Member(0), RuntimeError("busy, retry after 5s"), ErrorClass.TRANSIENT)
    assert clock.sleeps == [5.0]


def test_a_concurrency_reject_waits_on_the_pool_wide_backoff_not_here() -> None:
    budget, supervisor, clock = retry(PoolConfig(transient_retries=3))
    budget.after_failure(Member(2), RuntimeError("RESOURCE_EXHAUSTED"), ErrorClass.CONCURRENCY_REJECT)
    assert supervisor.back_offs == [(2, "submitting on")] and clock.sleeps == []
    assert budget.refused == 1 and budget.poisoned == 0


def test_poisoned_submits_are_bounded_by_attempts() -> None:
    budget, _, clock = retry(PoolConfig(poisoned_submit_attempts=3, rebuild_budget_s=60.0))
    budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)
    budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)
    assert clock.sleeps == [pytest.approx(0.1), pytest.approx(0.2)]
    with pytest.raises(SubmitFailedError, match="poisoned 3 stream") as info:
        budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)
    assert info.value.attempts == 3


def test_poisoned_submits_are_bounded_by_the_rebuild_budget_and_never_wait_past_it() -> None:
    budget, _, clock = retry(PoolConfig(poisoned_submit_attempts=100, rebuild_budget_s=0.25))
    budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)  # waits 0.1
    budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)  # 0.2 capped to 0.15
    assert clock.sleeps == [pytest.approx(0.1), pytest.approx(0.15)]
    with pytest.raises(SubmitFailedError, match="poisoned 3 stream"):
        budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)


def test_refused_and_poisoned_submits_have_separate_budgets() -> None:
    budget, _, _ = retry(PoolConfig(transient_retries=1, poisoned_submit_attempts=2))
    budget.after_failure(Member(0), RuntimeError("bad"), ErrorClass.POISON)
    budget.after_failure(Member(0), RuntimeError("unavailable"), ErrorClass.TRANSIENT)
    assert budget.refused == 1 and budget.poisoned == 1
