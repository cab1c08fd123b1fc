"""The runtime end to end: official SDK -> embedded emulator -> Delta -> Iceberg read-back."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.support.runtime_helpers import fast_config
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import (
    ConfigError,
    PlanRefusedError,
    ResumeMismatchError,
    WriteBoundaryError,
)
from zerobus_orchestration.reserved import OFFSET, SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime, source_tag
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes, release_runtime
from zerobus_orchestration.sink import CoverageNotRecordedError
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config
from zerobus_orchestration.transport.memory import MemoryTransport

TABLE = "main.raw.orders"


def orders(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": pa.array([f"c{i % 17}" for i in range(start, start + n)]),
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def delta_rows(rt: ZerobusRuntime, table: str = TABLE) -> pa.Table:
    rt.delta_version(table)  # commit the emulator's WAL
    return DeltaTable(table_uri(rt.config.warehouse, table)).to_pyarrow_table()


def test_write_is_durable_in_delta_and_verified_through_iceberg(runtime: ZerobusRuntime) -> None:
    data = orders(50_000)
    result = runtime.write(TABLE, data.to_reader(max_chunksize=5_000), source="orders")
    assert (result.rows_written, result.rows_skipped) == (50_000, 0)
    assert (result.offset_start, result.offset_end) == (0, 50_000)
    assert result.delta_version is not None and result.delta_version >= 1
    # The caller's own bytes, and those bytes as sent: plus 8 + 8 bytes of stamps and the tag per row.
    assert result.payload_bytes == data.nbytes
    assert result.bytes_written > result.payload_bytes + 50_000 * 16
    assert result.as_dict()["payload_mb_per_s"] == result.payload_mb_per_s
    assert 0 < result.payload_mb_per_s < result.stamped_mb_per_s

    landed = delta_rows(runtime)
    assert landed.num_rows == 50_000
    assert sorted(landed.column("order_id").to_pylist()) == list(range(50_000))
    assert set(landed.column(SOURCE).to_pylist()) == {"orders"}
    assert sorted(landed.column(OFFSET).to_pylist()) == list(range(50_000))

    report = runtime.verify(TABLE, source="orders")
    assert report.verified, report.to_json()
    assert report.rows_scanned == 50_000
    assert report.duplicate_count == 0


def test_a_retried_write_resumes_from_coverage_and_sends_only_gaps(runtime: ZerobusRuntime) -> None:
    data = orders(10_000)
    first = runtime.write(TABLE, data.slice(0, 6_000), source="orders", partition="2026-11-29")
    assert first.rows_written == 6_000
    # The retry replays the whole input: only positions [6000, 10000) are missing from coverage.
    retry = runtime.write(TABLE, data, source="orders", partition="2026-11-29")
    assert (retry.rows_written, retry.rows_skipped) == (4_000, 6_000)
    assert retry.payload_bytes == data.slice(6_000).nbytes  # skipped rows are not counted
    assert retry.offset_end == 10_000
    landed = delta_rows(runtime)
    assert landed.num_rows == 10_000  # nothing duplicated
    assert runtime.covered(TABLE, source="orders", partition="2026-11-29")[0].end == 10_000
    assert runtime.verify(TABLE, source="orders", partition="2026-11-29").verified


def test_partitions_of_one_source_stay_apart(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, orders(100), source="orders", partition="a")
    runtime.write(TABLE, orders(100), source="orders", partition="b")
    landed = delta_rows(runtime)
    assert sorted(set(landed.column(SOURCE).to_pylist())) == [
        source_tag("orders", "a"),
        source_tag("orders", "b"),
    ]
    report = runtime.verify(TABLE, source="orders")
    assert report.verified and report.duplicate_count == 0 and report.rows_scanned == 200
    only_a = runtime.read_rows(TABLE, source="orders", partition="a")
    assert only_a.num_rows == 100


def test_a_bad_column_fails_before_anything_is_sent(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, orders(10), source="orders")
    bad = pa.table(
        {
            "order_id": pa.array([1], pa.int64()),
            "customer": pa.array([{"name": "x"}]),  # a struct into the STRING column
            "amount": pa.array([1.0]),
        }
    )
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, bad, source="orders", partition="bad")
    message = str(failure.value)
    assert TABLE in message and "customer" in message and "to_json" in message
    assert delta_rows(runtime).num_rows == 10
    assert runtime.covered(TABLE, source="orders", partition="bad") == ()


def test_a_cast_batch_is_counted_once_in_type_reconcile(runtime: ZerobusRuntime) -> None:
    """The guard counts each cast by kind; nothing else may count the same batch again."""
    runtime.write(TABLE, orders(10), source="orders")
    narrow = orders(3, start=10).set_column(0, "order_id", pa.array(range(10, 13), pa.int32()))
    runtime.write(TABLE, narrow, source="orders", partition="narrow")
    counted = {
        sample.labels["kind"]: sample.value
        for family in runtime.metrics.registry.collect()
        if family.name == "zerobus_type_reconcile"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["table"] == TABLE
    }
    assert counted == {"cast_integer": 1.0}


def test_incompatible_schema_drift_is_refused_naming_the_column(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, orders(10), source="orders")
    with pytest.raises(PlanRefusedError) as failure:
        runtime.reconcile(TABLE, pa.schema([("order_id", pa.string())]))
    assert "order_id" in str(failure.value) and TABLE in str(failure.value)


def test_additive_drift_evolves_the_table(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, orders(10), source="orders")
    wider = orders(10, start=10).append_column("channel", pa.array(["web"] * 10))
    runtime.write(TABLE, wider, source="orders", partition="2")
    landed = delta_rows(runtime)
    assert "channel" in landed.column_names
    assert landed.num_rows == 20


def test_registry_shares_one_runtime_per_process_and_config(tmp_path: Path) -> None:
    cfg = fast_config(tmp_path / "wh")
    try:
        a = acquire_runtime(cfg)
        b = acquire_runtime(cfg)
        assert a is b
        release_runtime(cfg)
        release_runtime(cfg)
        assert acquire_runtime(cfg) is a  # release never closes: the pool outlives a step
        other = acquire_runtime(fast_config(tmp_path / "other"))
        assert other is not a
    finally:
        close_all_runtimes()
    assert acquire_runtime(cfg) is not a  # closed runtimes are dropped from the registry
    close_all_runtimes()


def test_health_reports_the_pool_after_a_write(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, orders(1_000), source="orders")
    health = runtime.health().as_dict()
    assert health["embedded"] is True and health["healthy"] is True
    (pool,) = health["pools"]
    assert pool["table"] == TABLE and pool["delivered"] == pool["submitted"] >= 1
    assert pool["pending"] == 0


def test_writes_share_the_table_s_long_lived_streams(runtime: ZerobusRuntime) -> None:
    """No stream per write: every write of the process goes through the same pool and streams."""
    assert runtime.emulator is not None
    first = runtime.sink(TABLE, source="run-1")
    first.push(orders(100))
    first.flush()
    second = runtime.sink(TABLE, source="run-2")
    assert second.pool is first.pool
    runtime.write(TABLE, orders(100), source="run-3")
    second.push(orders(100))
    second.flush()
    assert runtime.emulator.open_streams(TABLE) == first.pool.size  # the streams stayed open, not re-made
    assert delta_rows(runtime).num_rows == 300


def test_a_failed_coverage_record_fails_the_write_naming_the_fix(
    runtime: ZerobusRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that land without their coverage record must not pass as a clean write.

    The store fails (as a full disk would); the official SDK still delivers through the emulator. The
    write raises, the rows are in Delta all the same, and read-back counts them outside coverage.
    """
    runtime.write(TABLE, orders(10), source="orders")  # opens the store and the streams first

    def disk_full(self: CoverageStore, items: object, digests: object = ()) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    # The ack lane records a range and its content digest in one call (``record_delivered``).
    monkeypatch.setattr(CoverageStore, "record_delivered", disk_full)
    monkeypatch.setattr(CoverageStore, "record_many", disk_full)
    with pytest.raises(CoverageNotRecordedError) as failure:
        runtime.write(TABLE, orders(110), source="orders")  # the replay: positions 10..109 are new
    message = str(failure.value)
    assert TABLE in message and "database or disk is full" in message
    assert "zerobus.coverage.location" in message
    monkeypatch.undo()
    assert delta_rows(runtime).num_rows == 110  # delivered all the same
    report = runtime.verify(TABLE, source="orders")
    assert report.report is not None and report.report["rows_outside_coverage"] == 100
    assert report.duplicate_count == 0


def test_kafka_style_offsets_with_gaps_resume_and_read_back_exactly(runtime: ZerobusRuntime) -> None:
    """A declared offset column with gaps, through the official SDK, Delta and Iceberg read-back.

    The first attempt stops part-way; the retry replays the whole topic slice and sends only the
    offsets coverage lacks. Read-back must not look for the offsets that never existed.
    """
    offsets = [o for o in range(1_000, 4_000) if o % 7 != 3]  # compaction left a gap every 7 offsets
    topic = pa.table(
        {
            "kafka_offset": pa.array(offsets, pa.int64()),
            "payload": pa.array([f"m{o}" for o in offsets]),
        }
    )
    first = runtime.write(TABLE, topic.slice(0, 1_500), source="topic", offset_column="kafka_offset")
    assert first.rows_written == 1_500
    retry = runtime.write(
        TABLE, topic.to_reader(max_chunksize=400), source="topic", offset_column="kafka_offset"
    )
    assert (retry.rows_written, retry.rows_skipped) == (len(offsets) - 1_500, 1_500)
    landed = delta_rows(runtime)
    assert sorted(landed.column(OFFSET).to_pylist()) == offsets  # each offset once, no gap filled
    covered = runtime.covered(TABLE, source="topic")
    assert sum(len(r) for r in covered) == len(offsets) and covered[0].start == 1_000
    report = runtime.verify(TABLE, source="topic")
    assert report.verified and report.missing_ranges == [] and report.duplicate_count == 0


def test_a_remote_runtime_warns_when_coverage_is_a_per_host_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = {
        "endpoint": "https://1234.zerobus.us-west-2.cloud.databricks.com",
        "workspace_url": "https://dbc-1234.cloud.databricks.com",
        "client_id": "sp",
        "client_secret": "sp-secret",
        "warehouse": str(tmp_path / "wh"),
    }
    for config, warns in (
        (ZerobusConfig(**remote), True),
        (ZerobusConfig(**remote, coverage={"location": str(tmp_path / "shared.sqlite")}), False),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="zerobus_orchestration.runtime.facade"):
            ZerobusRuntime(config, transport=MemoryTransport()).close()
        assert ("zerobus.coverage.location" in caplog.text) is warns, caplog.text
        assert "sp-secret" not in caplog.text


def test_a_source_that_would_read_as_a_partition_is_refused(runtime: ZerobusRuntime) -> None:
    assert source_tag("orders", "2026-11-29") == "orders[2026-11-29]"
    with pytest.raises(ConfigError, match=r"source 'orders\[2026-11-29\]' contains '\['.*fix: rename"):
        runtime.write(TABLE, orders(3), source="orders[2026-11-29]")
    assert runtime.catalog.describe(TABLE) is None  # refused before anything was created or sent


def test_a_settled_partition_is_packed_after_a_write_and_still_resumes_verified(tmp_path: Path) -> None:
    """``compact_after_s = 0``: the write packs its own partition once durable; a retry with the same
    input skips it all, one whose rows changed is refused before anything is sent."""
    config = embedded_test_config(tmp_path / "wh", coverage={"compact_after_s": 0})
    runtime = acquire_runtime(config)
    try:
        data = orders(3_000)
        runtime.write(TABLE, data.to_reader(max_chunksize=500), source="orders", partition="2026-01-01")
        conn = sqlite3.connect(runtime.coverage(TABLE).path)
        loose, packs = (
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("coverage_digests", "coverage_digest_packs")
        )
        conn.close()
        assert (loose, packs) == (0, 1)
        retry = runtime.write(TABLE, data, source="orders", partition="2026-01-01")
        assert (retry.rows_written, retry.rows_skipped) == (0, 3_000)
        changed = data.set_column(2, "amount", pa.array([1.0] * 3_000, pa.float64()))
        with pytest.raises(ResumeMismatchError, match=r"\[0, 500\)"):
            runtime.write(TABLE, changed, source="orders", partition="2026-01-01")
        assert delta_rows(runtime).num_rows == 3_000
    finally:
        close_all_runtimes()
