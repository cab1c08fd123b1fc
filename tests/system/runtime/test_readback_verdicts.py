"""Read-back verdicts people can alert on, through the official SDK, the emulator, Delta and Iceberg.

* Rows deleted from a verified partition are ``LOST`` as soon as Iceberg shows the delete (one mirror
  cycle), not "not all visible yet" until the deadline: the emulator committed everything it
  acknowledged, so the snapshot that reflects that version cannot be late.
* Rows in the table twice (at-least-once re-sends) are ``DUPLICATED``: not verified, with the count and
  a sample, where the old verdict passed them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.config import ReadbackConfig
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.runtime.dedupe import dedupe
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

pytestmark = pytest.mark.integration

TABLE = "main.raw.verdicts"
SOURCE, PARTITION = "events", "2026-11-01"
DEADLINE_S = 600.0  # far beyond one mirror cycle: a verdict that waited for it would time the test out


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ZerobusRuntime]:
    config = embedded_test_config(
        tmp_path / "wh",
        iceberg_lag_s=0.5,
        readback=ReadbackConfig(wait_timeout_s=DEADLINE_S, poll_initial_s=0.05, poll_max_s=0.5),
    )
    rt = acquire_runtime(config)
    try:
        yield rt
    finally:
        close_all_runtimes()


def _events(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "day": pa.array([PARTITION] * n)})


def test_rows_deleted_from_a_verified_partition_are_lost_within_one_mirror_cycle(
    runtime: ZerobusRuntime,
) -> None:
    runtime.write(TABLE, _events(1_000), source=SOURCE, partition=PARTITION)
    assert runtime.verify(TABLE, source=SOURCE, partition=PARTITION).verified

    # Someone deletes 50 rows with a plain row-level delete (deltalake rewrites the file it touches).
    delta = DeltaTable(table_uri(runtime.config.warehouse, TABLE))
    delta.delete("_twg_offset >= 100 AND _twg_offset < 150")
    deleted_at = DeltaTable(table_uri(runtime.config.warehouse, TABLE)).version()

    seen: list[ReadbackStatus] = []
    started = time.monotonic()
    while True:
        outcome = runtime.verify_once(TABLE, source=SOURCE, partition=PARTITION)
        seen.append(outcome.status)
        if outcome.is_terminal or time.monotonic() - started > 60:
            break
        time.sleep(0.05)
    # Until Iceberg shows the delete the verdict is "not visible yet"; the first snapshot that shows it
    # says LOST, never "incomplete, keep waiting".
    assert set(seen[:-1]) <= {ReadbackStatus.NOT_VISIBLE_YET}, seen
    assert outcome.status is ReadbackStatus.LOST, outcome.message
    report = outcome.report or {}
    assert report["iceberg_delta_version"] == deleted_at
    assert [(m["start"], m["end"]) for m in outcome.lost_ranges] == [(100, 150)] and outcome.lost_rows == 50
    (lost,) = outcome.lost_ranges
    assert (lost["cause"], lost["removed_at_version"], lost["operation"]) == ("deleted", deleted_at, "DELETE")
    assert TABLE in outcome.message and "LOST" in outcome.message and "100..149" in outcome.message
    assert f"deleted by Delta version {deleted_at} (DELETE)" in outcome.message
    assert "docs/runbook.md" in outcome.message

    # The waiting verb answers at once too, far before its deadline.
    waited = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
    assert waited.status is ReadbackStatus.LOST
    assert (waited.report or {})["waited_s"] < DEADLINE_S / 10

    # What the message (and docs/runbook.md) says to do brings them back: a plain re-run sends nothing
    # (its coverage says every row was delivered); one with resume off sends all again, and the repair
    # keeps one copy of each.
    assert "--no-resume" in outcome.message and "repair --dedupe" in outcome.message
    assert runtime.write(TABLE, _events(1_000), source=SOURCE, partition=PARTITION).rows_written == 0
    again = runtime.write(TABLE, _events(1_000), source=SOURCE, partition=PARTITION, resume=False)
    assert again.rows_written == 1_000
    assert runtime.verify(TABLE, source=SOURCE, partition=PARTITION).status is ReadbackStatus.DUPLICATED
    assert (
        dedupe(runtime.catalog, runtime.config, TABLE, source=SOURCE, partition=PARTITION).removed_rows == 950
    )
    repaired = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
    assert repaired.status is ReadbackStatus.VERIFIED and repaired.rows_scanned == 1_000


HOLD_S = 8.0  # the commit delay: long enough for several looks at the snapshot without the held rows


def test_acknowledged_rows_not_committed_yet_are_late_not_lost(tmp_path: Path) -> None:
    """The service acknowledged every row but commits the later batches only ``HOLD_S`` after it wrote
    them (emulator fault ``delay_commit``; asking it to commit now does not hurry it). The snapshot that
    shows the first batches lacks the rest, and the Delta log shows them in no version: not committed
    yet, so the verdict is ``INCOMPLETE`` (wait), never ``LOST``; once they are committed it verifies.
    Before, embedded read-back took the version it had asked the emulator to commit as holding every
    acknowledged row and called them lost on the first look."""
    from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec

    config = embedded_test_config(
        tmp_path / "wh",
        iceberg_lag_s=0.5,
        pool={"min_streams": 1},
        readback=ReadbackConfig(wait_timeout_s=DEADLINE_S, poll_initial_s=0.05, poll_max_s=0.5),
    )
    runtime = acquire_runtime(config)
    try:
        assert runtime.emulator is not None
        runtime.reconcile(TABLE, pa.schema([("id", pa.int64()), ("day", pa.string())]))
        runtime.emulator.faults.add(
            FaultSpec(kind=FaultKind.DELAY_COMMIT, table=TABLE, after_batches=2, delay_s=HOLD_S)
        )
        batches = [_events(2_000).slice(i * 100, 100).to_batches()[0] for i in range(20)]
        held_from = time.monotonic()
        result = runtime.write(TABLE, pa.Table.from_batches(batches), source=SOURCE, partition=PARTITION)
        assert result.rows_written == 2_000  # every row acknowledged

        seen: list[ReadbackStatus] = []
        while time.monotonic() - held_from < HOLD_S - 2:
            outcome = runtime.verify_once(TABLE, source=SOURCE, partition=PARTITION)
            seen.append(outcome.status)
            time.sleep(0.2)
        # The fault acted: rows acknowledged and not in the table while it held them.
        assert runtime.emulator.faults.actions_of(FaultKind.DELAY_COMMIT)
        assert ReadbackStatus.INCOMPLETE in seen, seen
        assert set(seen) <= {ReadbackStatus.NOT_VISIBLE_YET, ReadbackStatus.INCOMPLETE}, seen
        late = runtime.verify_once(TABLE, source=SOURCE, partition=PARTITION)
        if late.status is ReadbackStatus.INCOMPLETE:
            assert late.lost_ranges == [] and late.missing_rows > 0 and "LOST" not in late.message

        # The waiting verb waits them out and verifies once they are committed.
        waited = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
        assert waited.status is ReadbackStatus.VERIFIED, waited.message
        assert waited.rows_scanned == 2_000
    finally:
        close_all_runtimes()


def test_a_re_sent_copy_is_duplicated_not_verified(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, _events(300), source=SOURCE, partition=PARTITION)
    # resume=False sends every row again: the copies land beside the first ones (at-least-once).
    runtime.write(TABLE, _events(300).slice(0, 120), source=SOURCE, partition=PARTITION, resume=False)

    outcome = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)

    assert outcome.status is ReadbackStatus.DUPLICATED, outcome.message
    assert not outcome.verified and outcome.duplicate_count == 120 and outcome.rows_scanned == 420
    assert outcome.duplicate_sample[0] == {
        "source": f"{SOURCE}[{PARTITION}]",
        "partition": None,
        "offset": 0,
        "count": 2,
    }
    assert "repair --dedupe" in outcome.message


ACK_TIMEOUT_MS = 800


@pytest.mark.parametrize(
    "sdk_recovery", [True, False], ids=["sdk-replays-in-stream", "pool-rebuilds-and-resubmits"]
)
def test_withheld_acks_leave_duplicates_the_result_counts_and_repair_removes(
    tmp_path: Path, sdk_recovery: bool
) -> None:
    """The emulator writes batches durably but never acknowledges them on the first stream. Either the
    SDK reconnects and replays them itself, or (recovery off) the stream dies and the pool re-submits
    them on a new one: both land them twice. The write's result counts the re-sent rows (the pool's
    re-submits counted 0 before), read-back says DUPLICATED with the real count, and ``repair --dedupe``
    leaves each row once, after which read-back verifies."""
    from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
    from zerobus_orchestration.testing.settings import FAULT_TEST_SDK_OPTIONS

    sdk = FAULT_TEST_SDK_OPTIONS.model_copy(
        update={
            "server_lack_of_ack_timeout_ms": ACK_TIMEOUT_MS,
            "flush_timeout_ms": 10_000,
            "recovery": sdk_recovery,
        }
    )
    config = embedded_test_config(
        tmp_path / "wh",
        sdk=sdk,
        pool={"min_streams": 1},
        readback=ReadbackConfig(wait_timeout_s=60, poll_initial_s=0.05, poll_max_s=0.5),
    )
    runtime = acquire_runtime(config)
    try:
        assert runtime.emulator is not None
        runtime.reconcile(TABLE, pa.schema([("id", pa.int64()), ("day", pa.string())]))
        runtime.emulator.faults.add(
            FaultSpec(kind=FaultKind.WITHHOLD_ACKS, table=TABLE, protocol="arrow", after_batches=2)
        )
        batches = [_events(2_000).slice(i * 100, 100).to_batches()[0] for i in range(20)]
        result = runtime.write(TABLE, pa.Table.from_batches(batches), source=SOURCE, partition=PARTITION)

        # The fault acted: a second stream, opened by the SDK or by the pool's rebuild.
        assert runtime.emulator.streams_opened(TABLE) == 2
        assert runtime.health().pools[0].rebuilds == (0 if sdk_recovery else 1)
        landed = DeltaTable(table_uri(config.warehouse, TABLE)).to_pyarrow_table(columns=["_twg_offset"])
        duplicates = landed.num_rows - len(set(landed.column("_twg_offset").to_pylist()))
        assert result.rows_written == 2_000 and duplicates > 0
        assert duplicates <= result.rows_possibly_resent <= 2_000

        outcome = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
        assert outcome.status is ReadbackStatus.DUPLICATED, outcome.message
        assert outcome.duplicate_count == duplicates and not outcome.verified

        report = dedupe(runtime.catalog, config, TABLE, source=SOURCE, partition=PARTITION)
        assert report.removed_rows == duplicates
        repaired = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
        assert repaired.status is ReadbackStatus.VERIFIED, repaired.message
        assert repaired.rows_scanned == 2_000 and repaired.duplicate_count == 0
    finally:
        close_all_runtimes()
