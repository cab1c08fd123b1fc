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
    assert report["iceberg_delta_version"] == deleted_at and report["settled_version"] == deleted_at
    assert [(m["start"], m["end"]) for m in outcome.lost_ranges] == [(100, 150)] and outcome.lost_rows == 50
    assert TABLE in outcome.message and "LOST" in outcome.message and "100..149" in outcome.message

    # The waiting verb answers at once too, far before its deadline.
    waited = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
    assert waited.status is ReadbackStatus.LOST
    assert (waited.report or {})["waited_s"] < DEADLINE_S / 10


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
