"""The resume's catch-up with the table, and the skip of what the table shows (fake clock, real Arrow)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import commit_rhythm, table_truth
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.resume.pieces import resumed_pieces
from zerobus_orchestration.resume.slices import ResumeSlice
from zerobus_orchestration.resume.truth import (
    CaughtUp,
    TruthSkip,
    catch_up,
    emission_bound,
    learn_from_table,
    settle_period,
)

R = OffsetRange
TABLE = "main.raw.t"


class FakeTable:
    """A table whose delivered ranges change at given times; its version moves with them."""

    def __init__(self, timeline: Sequence[tuple[float, tuple[OffsetRange, ...]]]) -> None:
        self.timeline = timeline
        self.now = 0.0
        self.scans = 0

    def _state(self) -> tuple[int, tuple[OffsetRange, ...]]:
        index = max(i for i, (at, _) in enumerate(self.timeline) if at <= self.now)
        return index, self.timeline[index][1]

    def version(self) -> int | None:
        return self._state()[0]

    def ranges(self) -> tuple[OffsetRange, ...]:
        self.scans += 1
        return self._state()[1]

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(
    table: FakeTable,
    cached: tuple[OffsetRange, ...] = (),
    settle_s: float = 1.0,
    max_s: float = 10.0,
    rhythm: Sequence[float] = (),
) -> CaughtUp:
    return catch_up(
        table.ranges,
        table.version,
        cached=cached,
        settle_s=settle_s,
        max_s=max_s,
        rhythm=lambda: rhythm,
        poll_s=0.1,
        clock=lambda: table.now,
        sleep=table.sleep,
    )


def test_nothing_delivered_anywhere_is_a_first_write_and_waits_for_nothing() -> None:
    table = FakeTable([(0.0, ())])
    caught = run(table)
    assert caught.settled and caught.ranges == () and table.now == 0.0


def test_waits_until_the_table_stops_changing() -> None:
    table = FakeTable([(0.0, (R(0, 10),)), (0.55, (R(0, 20),)), (1.25, (R(0, 30),))])
    caught = run(table)
    assert caught.settled and caught.ranges == (R(0, 30),)
    assert 2.25 <= table.now < 2.5  # one settle period after the last change
    assert table.scans == 3  # rescanned only when the version moved


def test_waits_until_the_table_holds_what_the_cache_recorded() -> None:
    table = FakeTable([(0.0, (R(0, 10),)), (3.0, (R(0, 40),))])
    caught = run(table, cached=(R(0, 40),), settle_s=0.0)
    assert caught.settled and caught.ranges == (R(0, 40),) and 3.0 <= table.now < 3.2


def test_no_settle_period_when_nothing_more_can_arrive() -> None:
    table = FakeTable([(0.0, (R(0, 10),))])
    caught = run(table, cached=(R(0, 5),), settle_s=0.0)
    assert caught.settled and table.now == 0.0


def test_bounded_by_max_s_when_the_table_never_settles() -> None:
    timeline = [(i * 0.5, (R(0, 10 * (i + 1)),)) for i in range(100)]
    table = FakeTable(timeline)
    caught = run(table, max_s=3.0)
    assert not caught.settled and 3.0 <= caught.waited_s < 3.2


def test_a_table_committing_slowly_is_waited_for_longer_than_the_settle_period() -> None:
    """The service commits every 3 s within a write (its rhythm): rows acknowledged before the crash land
    2.5 s into the catch-up. The configured 1 s settle period would end before them."""
    timeline = [(0.0, (R(0, 10),)), (2.5, (R(0, 30),))]
    assert run(FakeTable(timeline)).ranges == (R(0, 10),)  # without the rhythm: settled too early
    table = FakeTable(timeline)
    caught = run(table, rhythm=(3.0, 2.9, 3.1))
    assert caught.settled and caught.ranges == (R(0, 30),)
    assert caught.settle_s == pytest.approx(4.65) and 7.15 <= table.now < 7.35  # 1.5 x the longest gap


def test_a_table_committing_fast_is_waited_for_less_than_the_configured_period() -> None:
    """The rhythm replaces the configured period, shorter too: a resume 2 s after the last write of a
    service committing every 0.4 s waits 0.6 s, not the configured 2 s."""
    table = FakeTable([(0.0, (R(0, 10),))])
    caught = run(table, settle_s=2.0, rhythm=(0.4, 0.38))
    assert caught.settled and caught.settle_s == pytest.approx(0.6) and 0.6 <= table.now < 0.8


def test_settle_period_from_the_commit_rhythm() -> None:
    assert settle_period(2.0, (), 30.0) == 2.0  # no rhythm shown: the configured period
    assert settle_period(2.0, (0.5, 0.8), 30.0) == pytest.approx(1.2)  # the rhythm's, shorter too
    assert settle_period(2.0, (4.0, 1.0), 30.0) == 6.0
    assert settle_period(2.0, (25.0,), 30.0) == 30.0  # never past the catch-up's bound
    assert settle_period(40.0, (), 30.0) == 30.0
    assert settle_period(0.0, (4.0,), 30.0) == 0.0  # nothing more can arrive: no wait at all


def batches(n: int, size: int) -> list[ResumeSlice]:
    return [
        ResumeSlice(start, pa.record_batch({"id": pa.array(range(start, start + size), pa.int64())}))
        for start in range(0, n, size)
    ]


def learner(ranges: tuple[OffsetRange, ...], calls: list[int]) -> Callable[[], tuple[OffsetRange, ...]]:
    def learn() -> tuple[OffsetRange, ...]:
        calls.append(1)
        return ranges

    return learn


def test_the_table_is_not_read_when_the_cache_held_every_row() -> None:
    calls: list[int] = []
    skip = TruthSkip([], learner((R(0, 10),), calls), cached=(R(0, 100),), offset_column=None, table="t")
    assert list(skip) == [] and calls == [] and not skip.consulted


def test_positions_the_table_shows_are_skipped_and_counted() -> None:
    calls: list[int] = []
    # The cache resumed from 40 (it held [0, 40)); the table also shows [40, 55) and [70, 75).
    pieces = [p for p in batches(100, 10) if p.start_offset >= 40]
    skip = TruthSkip(
        pieces, learner((R(0, 55), R(70, 75)), calls), cached=(R(0, 40),), offset_column=None, table="t"
    )
    sent = list(skip)
    positions = [v for piece in sent for v in piece.batch.column("id").to_pylist()]
    assert positions == [*range(55, 70), *range(75, 100)]
    assert all(piece.batch.column("id")[0].as_py() == piece.start_offset for piece in sent)
    assert calls == [1]  # learnt once, on the first slice
    assert skip.rows_skipped == 20 and skip.learnt == (R(40, 55), R(70, 75))
    assert skip.rows_resent == 15  # [55, 70): below the highest position known delivered


def test_rows_below_how_far_an_earlier_attempt_got_are_counted_resent() -> None:
    # The earlier attempt handed [0, 90) to its sink; the cache and the table show only [0, 40) (the
    # rest still on its way when the table was read): [40, 90) may land twice, [90, 100) cannot.
    pieces = [p for p in batches(100, 10) if p.start_offset >= 40]
    skip = TruthSkip(
        pieces, learner((R(0, 40),), []), cached=(R(0, 40),), offset_column=None, table="t", handed_out=90
    )
    assert sum(piece.batch.num_rows for piece in skip) == 60
    assert skip.rows_resent == 50


def test_with_a_declared_offset_column() -> None:
    calls: list[int] = []
    batch = pa.record_batch({"off": pa.array([9, 3, 4, 20, 5], pa.int64())})
    skip = TruthSkip(
        [ResumeSlice(9, batch)], learner((R(3, 5),), calls), cached=(), offset_column="off", table="t"
    )
    sent = [v for piece in skip for v in piece.batch.column("off").to_pylist()]
    assert sent == [9, 20, 5] and skip.rows_skipped == 2 and skip.rows_resent == 0


def test_learnt_positions_are_recorded_into_the_cache(tmp_path: Path) -> None:
    """Rows visible in the table are durable: the cache may claim them (and only them)."""
    config = ZerobusConfig(warehouse=str(tmp_path / "wh"), coverage={"catch_up_settle_s": 0.0})  # type: ignore[arg-type]
    catalog = LocalCatalog(str(tmp_path / "wh"), registry_path=tmp_path / "registry.sqlite")
    write_deltalake(
        catalog.location(TABLE),
        pa.table({SOURCE: pa.array(["s[p]"] * 4), OFFSET: pa.array([0, 1, 2, 9], pa.int64())}),
    )
    key = CoverageKey("sink", "s[p]", "p")
    commits: list[str] = []
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as store:
        store.record(key, R(0, 1))
        learnt = learn_from_table(
            catalog,
            config,
            key,
            table=TABLE,
            source="s",
            cached=(R(0, 1),),
            cache=store,
            commit=commits.append,
            settle=True,
        )
        assert learnt == (R(0, 3), R(9, 10))
        assert store.ranges(key) == (R(0, 3), R(9, 10))
    assert commits == [TABLE]  # the emulator was asked to commit before the version was read

    off = config.model_copy(update={"coverage": config.coverage.model_copy(update={"consult_table": False})})
    assert (
        learn_from_table(
            catalog, off, key, table=TABLE, source="s", cached=(), cache=store, commit=None, settle=True
        )
        == ()
    )


def test_a_history_that_cannot_be_read_leaves_the_configured_settle_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit rhythm is a refinement: without it the resume still reads the table, warned once."""
    config = ZerobusConfig(warehouse=str(tmp_path / "wh"), coverage={"catch_up_settle_s": 0.2})  # type: ignore[arg-type]
    catalog = LocalCatalog(str(tmp_path / "wh"), registry_path=tmp_path / "registry.sqlite")
    write_deltalake(
        catalog.location(TABLE), pa.table({SOURCE: ["s[p]"] * 2, OFFSET: pa.array([0, 1], pa.int64())})
    )

    def unreadable(*_: object, **__: object) -> tuple[float, ...]:
        raise table_truth.TableTruthError("table main.raw.t: cannot read the Delta log's history")

    monkeypatch.setattr(commit_rhythm, "write_rhythm_s", unreadable)
    key = CoverageKey("sink", "s[p]", "p")
    with caplog.at_level(logging.WARNING), CoverageStore(tmp_path / "coverage.sqlite", TABLE) as store:
        learnt = learn_from_table(
            catalog, config, key, table=TABLE, source="s", cached=(), cache=store, commit=None, settle=True
        )
    assert learnt == (R(0, 2),)
    assert [r.getMessage() for r in caplog.records if "history" in r.getMessage()] == [
        "main.raw.t: s 'p': table main.raw.t: cannot read the Delta log's history; waiting the configured "
        "settle period only"
    ]


def test_emission_bound_takes_the_later_bound_less_the_margin() -> None:
    run_start = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)
    looked = int(dt.datetime(2026, 5, 1, 13, tzinfo=dt.UTC).timestamp() * 1e6)
    assert emission_bound(None, None, 60) is None  # nothing known: every file is read
    assert emission_bound(run_start, None, 60) == run_start - dt.timedelta(minutes=1)
    assert emission_bound(run_start, looked, 0) == dt.datetime(2026, 5, 1, 13, tzinfo=dt.UTC)
    assert emission_bound(None, looked, 3600) == dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)


def test_a_later_look_on_this_host_reads_only_files_since_the_earliest_row_it_saw(tmp_path: Path) -> None:
    """The first look reads every file (nothing bounds it) and notes the earliest stamp it saw; the next
    one, on the same host, skips files of rows stamped before it (an old file removed after the log is
    not opened), yet still holds every cached position (no wait for rows it can no longer see)."""
    config = ZerobusConfig(
        warehouse=str(tmp_path / "wh"), coverage={"catch_up_settle_s": 0.0, "emit_margin_s": 0.0}
    )  # type: ignore[arg-type]
    catalog = LocalCatalog(str(tmp_path / "wh"), registry_path=tmp_path / "registry.sqlite")
    uri = catalog.location(TABLE)

    def stamped(tag: str, offsets: list[int], at: dt.datetime) -> pa.Table:
        return pa.table(
            {
                SOURCE: pa.array([tag] * len(offsets)),
                OFFSET: pa.array(offsets, pa.int64()),
                EMIT_TS: pa.array([at] * len(offsets), pa.timestamp("us", tz="UTC")),
            }
        )

    long_ago = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    other_host = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    write_deltalake(uri, stamped("other[x]", [0, 1], long_ago))  # another partition, long ago
    write_deltalake(uri, stamped("s[p]", [0, 1, 2], other_host), mode="append")  # another host's attempt
    key = CoverageKey("sink", "s[p]", "p")
    data = pa.table({"v": pa.array(range(6), pa.int64())})

    def resume(store: CoverageStore) -> list[int]:
        pieces = resumed_pieces(
            iter(data.to_batches()),
            key,
            table=TABLE,
            source="s",
            offset_column=None,
            store=store,
            catalog=catalog,
            config=config,
            commit=None,
            settle=True,
        )
        return [start for _, start in pieces]  # type: ignore[misc]

    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as store:
        assert resume(store) == [3]  # learnt [0, 3) from the other host's rows
        assert store.first_seen(key) == int(other_host.timestamp() * 1e6)
        (old_file,) = DeltaTable(uri).file_uris(file_pruning_predicate=[(SOURCE, "=", "other[x]")])
        Path(old_file).unlink()
        write_deltalake(uri, stamped("s[p]", [3], dt.datetime.now(dt.UTC)), mode="append")  # a tail it missed
        assert resume(store) == [4]  # the old file was never opened; the tail was seen
