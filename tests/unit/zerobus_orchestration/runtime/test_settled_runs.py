"""When a decision about a partition's runs waits for the table to settle: a real Delta table written by
deltalake (standing in for the service's commits, which land while the wait sleeps), fake clocks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.config import CoverageConfig
from zerobus_orchestration.coverage.run_order import RunHistory
from zerobus_orchestration.coverage.table_truth import TableReader
from zerobus_orchestration.runtime.settled_runs import settled_history

R1, R2 = "events[d1@r1]", "events[d1@r2]"
SETTINGS = CoverageConfig(catch_up_settle_s=2.0, catch_up_max_s=30.0)


def append(uri: str, tag: str, n: int) -> None:
    """One commit of ``n`` rows of ``tag`` (the service committing what it acknowledged)."""
    write_deltalake(uri, pa.table({"_twg_source": [tag] * n, "v": list(range(n))}), mode="append")


class Clock:
    """Monotonic time that moves only when the wait sleeps; ``due`` commits land once it passes them."""

    def __init__(self, due: list[tuple[float, Callable[[], None]]] | None = None) -> None:
        self.now = 0.0
        self.slept = 0.0
        self.due = sorted(due or [], key=lambda item: item[0])

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        while self.due and self.due[0][0] <= self.now:
            self.due.pop(0)[1]()


def settle(
    uri: str,
    clock: Clock,
    *,
    expected: dict[str, int] | None = None,
    age_s: float = 0.0,
    settle: bool = True,
    commit: Callable[[str], object] | None = None,
) -> RunHistory:
    """``settled_history`` with the table's newest commit ``age_s`` old on this host's wall clock (however
    long the machine took since it was written)."""
    newest_s = DeltaTable(uri).history(limit=1)[0]["timestamp"] / 1000.0
    return settled_history(
        TableReader("main.raw.events", uri, {}),
        SETTINGS,
        source="events",
        key="d1",
        expected=expected or {},
        commit=commit,
        settle=settle,
        wall_clock=lambda: newest_s + age_s,
        clock=lambda: clock.now,
        sleep=clock.sleep,
    )


def test_a_table_nobody_wrote_for_longer_than_the_settle_period_is_read_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)
    clock = Clock()

    history = settle(uri, clock, age_s=60.0)

    assert clock.slept == 0.0, "a fresh partition on a quiet table waits for nothing"
    assert history.live() == frozenset()


def test_a_table_written_lately_is_read_once_it_stopped_changing(tmp_path: Path) -> None:
    """A's rows land 1.2 s into the wait, in two commits: the decision sees both."""
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)  # just now: rows of another run may be on their way
    clock = Clock([(1.2, lambda: append(uri, R1, 5)), (1.5, lambda: append(uri, R1, 5))])

    history = settle(uri, clock)

    assert history.rows_at(history.latest()) == {R1: 10}
    assert 3.5 <= clock.now < 3.8, "one settle period (2 s, no rhythm shown) after the last change"


def test_with_nothing_on_its_way_a_table_written_lately_costs_one_settle_period(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)
    clock = Clock()

    history = settle(uri, clock, age_s=0.5)

    assert history.live() == frozenset()
    assert 2.0 <= clock.now < 2.2


def test_runs_this_host_delivered_lately_are_waited_for_on_a_quiet_table(tmp_path: Path) -> None:
    """r1 was a short run of this host: no commit in the log says it is coming, its coverage does."""
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)
    clock = Clock([(4.0, lambda: append(uri, R1, 7))])

    history = settle(uri, clock, expected={R1: 7}, age_s=60.0)

    assert history.rows_at(history.latest()) == {R1: 7}
    assert 6.0 <= clock.now < 6.2, "until the table shows them, then one settle period (it moved)"


def test_an_in_process_emulator_commits_on_request_and_nothing_is_waited_for(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)
    committed: list[str] = []

    def commit(table: str) -> None:  # the emulator's WAL committed on request
        if not committed:
            append(uri, R2, 4)
        committed.append(table)

    clock = Clock()
    history = settle(uri, clock, settle=False, commit=commit, expected={R2: 4})

    assert clock.slept == 0.0 and committed == ["main.raw.events"]
    assert history.rows_at(history.latest()) == {R2: 4}


def test_rows_that_never_land_are_waited_for_up_to_catch_up_max_s(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = str(tmp_path / "t")
    append(uri, "events[d0@r0]", 3)
    clock = Clock()

    history = settle(uri, clock, expected={R1: 7}, age_s=60.0)

    assert history.live() == frozenset()
    assert 30.0 <= clock.now < 30.2
    assert "may be written twice" in caplog.text
