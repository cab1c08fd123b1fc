"""Read-back from the config alone: no write runtime, what to verify from the write's record or the table.

Rows are written through the runtime (official SDK -> embedded emulator), then the runtime is closed, as
on a verifying host that never wrote. ``ReadbackService.from_config`` finds the emulator's Iceberg
endpoint itself. A config whose coverage file does not exist stands for another host (no cache): the
expected ranges then come from the raw table's own ``(_twg_source, _twg_offset)`` columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.config import CoverageConfig, ZerobusConfig
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.endpoint import IcebergEndpoint
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.readback_service import ExpectedFrom, ReadbackService
from zerobus_orchestration.runtime.registry import readback_service, running_runtime
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.read_only"


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _write(config: ZerobusConfig, *writes: tuple[pa.Table, str, str, bool]) -> None:
    runtime = ZerobusRuntime(config)
    try:
        for rows, source, partition, resume in writes:
            runtime.write(TABLE, rows, source=source, partition=partition, resume=resume)
        runtime.flush()
    finally:
        runtime.close()  # the writer is gone: the verifier below has no runtime to borrow from


def _other_host(config: ZerobusConfig, tmp_path: Path) -> ZerobusConfig:
    """Same warehouse and catalog, but no coverage cache: what a host that never wrote sees."""
    location = tmp_path / "other-host" / "coverage.sqlite"
    return config.model_copy(update={"coverage": CoverageConfig(location=str(location))})


@pytest.fixture
def config(tmp_path: Path) -> ZerobusConfig:
    return embedded_test_config(tmp_path / "wh")


@pytest.fixture
def service(config: ZerobusConfig, tmp_path: Path) -> Iterator[ReadbackService]:
    standalone = ReadbackService.from_config(_other_host(config, tmp_path))
    yield standalone
    standalone.close()


def test_without_record_or_cache_the_table_itself_says_what_to_verify(
    config: ZerobusConfig, service: ReadbackService, tmp_path: Path
) -> None:
    _write(config, (_rows(120), "orders", "p1", True), (_rows(30), "orders", "p2", True))

    outcome = service.verify(TABLE, source="orders", partition="p1", wait_s=30)

    assert outcome.status is ReadbackStatus.VERIFIED, outcome.message
    report = outcome.report or {}
    assert report["expected_from"] == ExpectedFrom.TABLE.value
    assert report["expected_rows"] == 120 and report["rows_scanned"] == 120
    assert outcome.duplicate_count == 0 and not outcome.missing_ranges
    assert report["not_durable_ranges"] == []
    # Read-only: no write runtime was built, and the verifier left no coverage file of its own.
    assert running_runtime(service.config) is None
    assert not Path(service.config.coverage_location).exists()


def test_duplicates_in_the_table_are_counted_not_hidden(
    config: ZerobusConfig, service: ReadbackService
) -> None:
    # resume=False sends every row again: the second copy lands beside the first (at-least-once).
    _write(config, (_rows(40), "orders", "dup", True), (_rows(40), "orders", "dup", False))

    outcome = service.verify(TABLE, source="orders", partition="dup", wait_s=30)

    # Every delivered row is there, but twice: not verified (the old verdict passed it), with the count,
    # a sample and the repair that removes the extra copies.
    assert outcome.status is ReadbackStatus.DUPLICATED, outcome.message
    assert outcome.is_terminal and not outcome.verified
    assert outcome.duplicate_count == 40 and outcome.rows_scanned == 80
    assert [(d["offset"], d["count"]) for d in outcome.duplicate_sample[:2]] == [(0, 2), (1, 2)]
    assert "40 row(s) more than once" in outcome.message
    assert f"zerobus-orch repair --dedupe --table {TABLE} --source 'orders'" in outcome.message


def test_positions_missing_from_delta_itself_are_reported_not_durable(
    config: ZerobusConfig, service: ReadbackService
) -> None:
    # Positions 0-19 and 30-49 land (at= places a batch at its recorded position, as a resume does);
    # 20-29 never became durable: a write that did not finish.
    runtime = ZerobusRuntime(config)
    try:
        sink = runtime.sink(TABLE, source="orders", partition="holes")
        sink.send(_rows(20), at=0)
        sink.send(_rows(20, 30), at=30)
        sink.flush()
    finally:
        runtime.close()

    outcome = service.verify(TABLE, source="orders", partition="holes", wait_s=30)

    assert outcome.status is ReadbackStatus.INCOMPLETE, outcome.message
    report = outcome.report or {}
    assert [(m["start"], m["end"]) for m in report["not_durable_ranges"]] == [(20, 30)]
    assert [(m["start"], m["end"]) for m in outcome.missing_ranges] == [(20, 30)]
    assert "not durable" in outcome.message and "resume" in outcome.message


def test_a_verified_read_back_does_not_read_the_delta_log_for_lost_rows(
    config: ZerobusConfig, service: ReadbackService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telling lost from late reads the Delta log only for missing rows: a verified write pays nothing."""
    from zerobus_orchestration.coverage import absence

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a verified read-back read the Delta log to explain missing rows")

    _write(config, (_rows(40), "orders", "fine", True))
    monkeypatch.setattr(absence, "explain", refuse)
    assert service.verify(TABLE, source="orders", partition="fine", wait_s=30).verified  # table truth
    record = service.verify_once(TABLE, source="orders", partition="fine", ranges=[OffsetRange(0, 40)])
    assert record.status is ReadbackStatus.VERIFIED, record.message
    # The guard is real: a missing row does ask it.
    missing = service.verify_once(TABLE, source="orders", partition="fine", ranges=[OffsetRange(0, 41)])
    assert missing.status is ReadbackStatus.FAILED and "read the Delta log" in missing.message


def test_a_hole_a_delete_made_is_lost_not_undurable(config: ZerobusConfig, service: ReadbackService) -> None:
    """From the table's truth alone, a hole a row-removal commit made is told from one a write left: the
    rows were there before the delete, so they are lost (naming the delete), not "not durable"."""
    _write(config, (_rows(50), "orders", "cut", True))
    delta = DeltaTable(table_uri(config.warehouse, TABLE))
    delta.delete("_twg_offset >= 20 AND _twg_offset < 30")
    deleted_at = DeltaTable(table_uri(config.warehouse, TABLE)).version()

    outcome = service.verify(TABLE, source="orders", partition="cut", wait_s=30)

    assert outcome.status is ReadbackStatus.LOST, outcome.message
    report = outcome.report or {}
    assert report["expected_from"] == ExpectedFrom.TABLE.value and report["not_durable_ranges"] == []
    assert [(m["start"], m["end"], m["removed_at_version"]) for m in outcome.lost_ranges] == [
        (20, 30, deleted_at)
    ]
    assert "not durable" not in outcome.message
    assert f"positions 20..29 deleted by Delta version {deleted_at} (DELETE)" in outcome.message


def test_the_write_record_is_what_gets_verified(config: ZerobusConfig, service: ReadbackService) -> None:
    _write(config, (_rows(25), "orders", "rec", True))
    assert service.verify(TABLE, source="orders", partition="rec", wait_s=30).is_terminal  # past the lag

    exact = service.verify_once(TABLE, source="orders", partition="rec", ranges=[OffsetRange(0, 25)])
    assert exact.status is ReadbackStatus.VERIFIED, exact.message
    assert (exact.report or {})["expected_from"] == ExpectedFrom.RECORD.value

    # A record claiming 5 rows the table does not hold: the record decides, not the table. The Delta log
    # shows them in no version, so they may still be committing: late (INCOMPLETE), not lost.
    claimed = service.verify_once(TABLE, source="orders", partition="rec", ranges=[OffsetRange(0, 30)])
    assert claimed.status is ReadbackStatus.INCOMPLETE, claimed.message
    assert [(m["start"], m["end"]) for m in claimed.missing_ranges] == [(25, 30)]
    assert claimed.lost_ranges == [] and claimed.lost_rows == 0

    empty = service.verify_once(TABLE, source="orders", partition="rec", ranges=[])
    assert empty.status is ReadbackStatus.NOTHING_TO_VERIFY


def test_nothing_delivered_for_the_key_is_nothing_to_verify(
    config: ZerobusConfig, service: ReadbackService
) -> None:
    assert service.verify_once(TABLE, source="orders").status is ReadbackStatus.NOTHING_TO_VERIFY  # no table
    _write(config, (_rows(5), "orders", "", True))
    typo = service.verify_once(TABLE, source="ordres")
    assert typo.status is ReadbackStatus.NOTHING_TO_VERIFY and "'ordres'" in typo.message


def test_the_process_service_borrows_a_running_runtime_and_a_runtime_replaces_a_standalone_one(
    config: ZerobusConfig,
) -> None:
    from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes

    try:
        standalone = readback_service(config)
        assert running_runtime(config) is None and standalone.catalog is not None
        runtime = acquire_runtime(config)  # the verifier's in-process emulator must not block the writer
        runtime.write(TABLE, _rows(3), source="mixed")
        assert readback_service(config) is runtime.readbacks
    finally:
        close_all_runtimes()


def test_a_header_factory_is_asked_on_every_request(config: ZerobusConfig) -> None:
    """Production hands pyiceberg a refreshing service-principal header (``databricks-sdk`` OAuth);
    the endpoint must ask for it per request, never copy one token into the catalog's properties."""
    _write(config, (_rows(4), "orders", "auth", True))
    service = ReadbackService.from_config(config)
    try:
        assert service.verify(TABLE, source="orders", partition="auth", wait_s=30).is_terminal
        emulator = service._emulator()
        assert emulator is not None
        asked: list[int] = []

        def header() -> str:
            asked.append(1)
            return f"Bearer {emulator.access_token().get_secret_value()}"

        endpoint = IcebergEndpoint(uri=emulator.iceberg_rest_uri, header=header)
        endpoint.load_table(TABLE)
        first = len(asked)
        endpoint.load_table(TABLE)
        assert first >= 1 and len(asked) > first
    finally:
        service.close()
