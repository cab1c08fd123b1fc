"""Read-back: waiting out the Iceberg lag, the deadline, and the coverage verdict."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from tests.support.iceberg_helpers import LAG_S, raw_rows, write_delta
from zerobus_orchestration.config import ReadbackConfig
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.emulator.iceberg_rest import FacadeServer
from zerobus_orchestration.errors import ConfigError, ReadbackError, ReadbackTimeoutError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback import (
    CallableProbe,
    IcebergEndpoint,
    MissingRange,
    RowRef,
    SnapshotSummaryProbe,
    WaitPolicy,
    check_coverage,
    read_rows,
    verify_coverage,
    wait_for_delta_version,
)

TABLE = "main.raw.events"
FAST = WaitPolicy(timeout_s=10.0, initial_s=0.02, max_s=0.2)


def _key(source: str = "orders", partition: str = "") -> CoverageKey:
    return CoverageKey(sink="sink-1", source=source, partition=partition)


def _rows(pairs: list[tuple[str, int]], partitions: list[str] | None = None) -> pa.Table:
    columns = {
        "_twg_source": pa.array([s for s, _ in pairs], pa.string()),
        "_twg_offset": pa.array([o for _, o in pairs], pa.int64()),
    }
    if partitions is not None:
        columns["region"] = pa.array(partitions, pa.string())
    return pa.table(columns)


# --------------------------------------------------------------------- pure coverage check


def test_complete_coverage_has_nothing_to_report() -> None:
    check = check_coverage(_rows([("orders", o) for o in range(10)]), {_key(): [OffsetRange(0, 10)]})
    assert check.missing == () and check.duplicate_count == 0 and check.rows_outside_coverage == 0


def test_missing_ranges_are_reported_per_key() -> None:
    present = [o for o in range(20) if o not in (3, 4, 10, 19)]
    check = check_coverage(
        _rows([("orders", o) for o in present]),
        {_key(): [OffsetRange(0, 12), OffsetRange(12, 20)], _key("other"): [OffsetRange(0, 2)]},
    )
    assert check.missing == (
        MissingRange(_key("orders"), OffsetRange(3, 5)),
        MissingRange(_key("orders"), OffsetRange(10, 11)),
        MissingRange(_key("orders"), OffsetRange(19, 20)),
        MissingRange(_key("other"), OffsetRange(0, 2)),
    )


def test_duplicates_and_rows_outside_coverage_are_counted() -> None:
    pairs = [("orders", o) for o in range(5)] + [("orders", 2), ("orders", 2), ("orders", 4)]
    pairs += [("orders", 7), ("orders", 7), ("unrelated", 100)]
    check = check_coverage(_rows(pairs), {_key(): [OffsetRange(0, 5)]}, sample_size=1)
    assert check.missing == ()
    assert check.duplicate_count == 4  # offset 2 twice extra, 4 once, 7 once
    assert check.duplicate_sample == (RowRef("orders", 2, None, 3),)
    assert check.rows_outside_coverage == 2  # both copies of offset 7; other sources are not judged
    assert check.outside_sample == (RowRef("orders", 7, None),)


def test_partition_column_separates_equal_offsets() -> None:
    rows = _rows([("orders", 0), ("orders", 1), ("orders", 0)], partitions=["eu", "eu", "us"])
    coverage = {_key(partition="eu"): [OffsetRange(0, 2)], _key(partition="us"): [OffsetRange(0, 2)]}
    check = check_coverage(rows, coverage, partition_column="region")
    assert check.duplicate_count == 0
    assert check.missing == (MissingRange(_key(partition="us"), OffsetRange(1, 2)),)
    # Without the partition column the two partitions' offset 0 look like one re-sent row.
    assert check_coverage(rows, coverage).duplicate_count == 1


# --------------------------------------------------------------------- waiting


def test_wait_times_out_naming_table_and_versions() -> None:
    probe = CallableProbe(lambda table: 3)
    with pytest.raises(ReadbackTimeoutError) as caught:
        wait_for_delta_version(probe, TABLE, 7, WaitPolicy(timeout_s=0.2, initial_s=0.01, max_s=0.05))
    message = str(caught.value)
    assert TABLE in message and "Delta version 7" in message and "last seen: Delta version 3" in message


def test_wait_backs_off_until_the_probe_catches_up() -> None:
    answers = iter([None, None, 1, 2, 5])
    visible = wait_for_delta_version(CallableProbe(lambda t: next(answers)), TABLE, 4, FAST)
    assert visible.delta_version == 5 and visible.polls == 5


def test_readback_waits_across_the_mirror_lag(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, raw_rows(list(range(10))))
    probe = SnapshotSummaryProbe(endpoint)
    notified_at = time.monotonic()
    mirror.notify(TABLE, version)
    seen_before = probe.converted_delta_version(TABLE)
    if time.monotonic() - notified_at < LAG_S:  # on a starved machine the lag may already be over
        assert seen_before is None  # not mirrored yet: "not visible", not an error

    report = verify_coverage(
        endpoint, TABLE, {_key(): [OffsetRange(0, 10)]}, delta_version=version, policy=FAST
    )
    assert report.verified
    assert report.iceberg_delta_version == version and report.delta_version_expected == version
    assert report.rows_scanned == 10 and report.snapshot_id is not None
    assert probe.converted_delta_version(TABLE) == version

    # The next commit is invisible until the lag passes; read-back waits for it instead of failing.
    newer = write_delta(warehouse, TABLE, raw_rows([10, 11]))
    mirror.notify(TABLE, newer)
    report = verify_coverage(
        endpoint, TABLE, {_key(): [OffsetRange(0, 12)]}, delta_version=newer, policy=FAST
    )
    assert report.verified and report.iceberg_delta_version == newer and report.rows_scanned == 12


def test_readback_deadline_when_the_table_never_appears(endpoint: IcebergEndpoint) -> None:
    policy = WaitPolicy(timeout_s=0.3, initial_s=0.02, max_s=0.1)
    with pytest.raises(ReadbackTimeoutError, match="not visible in Iceberg yet") as caught:
        verify_coverage(endpoint, "main.raw.absent", {}, delta_version=0, policy=policy)
    assert "main.raw.absent" in str(caught.value) and "Delta version 0" in str(caught.value)


def test_readback_deadline_when_conversion_lags(warehouse: str, endpoint: IcebergEndpoint) -> None:
    with IcebergMirror(warehouse, lag_s=30.0, poll_interval_s=None) as slow:
        first = write_delta(warehouse, TABLE, raw_rows([0]))
        slow.sync_now(TABLE)
        second = write_delta(warehouse, TABLE, raw_rows([1]))
        slow.notify(TABLE, second)
        # The endpoint fixture serves the warehouse's catalog file, which `slow` writes.
        policy = WaitPolicy(timeout_s=0.3, initial_s=0.02, max_s=0.1)
        with pytest.raises(ReadbackTimeoutError, match=f"last seen: Delta version {first}"):
            verify_coverage(endpoint, TABLE, {}, delta_version=second, policy=policy)


def test_force_skips_the_lag(warehouse: str, facade_server: FacadeServer) -> None:
    # facade_server's mirror has a 0.3 s lag and nobody notifies it: only force can make this visible.
    version = write_delta(warehouse, TABLE, raw_rows(list(range(5))))
    endpoint = IcebergEndpoint(uri=facade_server.base_url)
    policy = WaitPolicy(timeout_s=0.2, initial_s=0.02, max_s=0.05)
    report = verify_coverage(
        endpoint, TABLE, {_key(): [OffsetRange(0, 5)]}, delta_version=version, force=True, policy=policy
    )
    assert report.verified and report.iceberg_delta_version == version


def test_force_against_a_catalog_without_the_sync_route(facade_server: FacadeServer) -> None:
    endpoint = IcebergEndpoint(uri=facade_server.base_url + "/elsewhere")
    with pytest.raises(ReadbackError, match="force=True needs the embedded"):
        endpoint.force_sync(TABLE)


def test_duplicates_and_missing_ranges_in_a_real_scan(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    write_delta(warehouse, TABLE, raw_rows([0, 1, 2, 3]))
    write_delta(warehouse, TABLE, raw_rows([2, 3]))  # an at-least-once re-send
    write_delta(warehouse, TABLE, raw_rows([6, 7], source="other"))
    version = write_delta(warehouse, TABLE, raw_rows([9]))  # delivered, but coverage never recorded it
    coverage = {_key(): [OffsetRange(0, 6)], _key("other"): [OffsetRange(6, 8)]}

    # Missing rows may still be committing: read-back looks again until its deadline, so a missing range
    # always costs the whole timeout. Forced, the mirror is already current; 1 s is still several scans.
    brief = WaitPolicy(timeout_s=1.0, initial_s=0.02, max_s=0.2)
    report = verify_coverage(endpoint, TABLE, coverage, delta_version=version, force=True, policy=brief)
    assert not report.verified
    assert report.missing_ranges == (MissingRange(_key(), OffsetRange(4, 6)),)
    assert report.duplicate_count == 2
    assert [(r.offset, r.count) for r in report.duplicate_sample] == [(2, 2), (3, 2)]
    assert report.rows_outside_coverage == 1 and report.outside_sample == (RowRef("orders", 9, None),)
    assert report.rows_scanned == 9

    as_dict = report.as_dict()
    assert as_dict["missing_ranges"] == [
        {"sink": "sink-1", "source": "orders", "partition": "", "start": 4, "end": 6}
    ]
    assert as_dict["missing_rows"] == 2 and as_dict["verified"] is False


def test_production_probe_is_a_plain_callable(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, raw_rows([0, 1]))
    mirror.sync_now(TABLE)
    calls: list[str] = []

    def converted_delta_version(table: str) -> int | None:
        calls.append(table)
        return version if len(calls) > 2 else None  # UC reports the conversion on the third poll

    report = verify_coverage(
        endpoint,
        TABLE,
        {_key(): [OffsetRange(0, 2)]},
        delta_version=version,
        probe=CallableProbe(converted_delta_version),
        policy=FAST,
    )
    assert report.verified and calls == [TABLE, TABLE, TABLE]


def test_read_back_replays_one_source_in_offset_order(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    write_delta(warehouse, TABLE, raw_rows([3, 4, 5]))
    write_delta(warehouse, TABLE, raw_rows([0, 1, 2, 4]))
    write_delta(warehouse, TABLE, raw_rows([0, 1], source="other"))
    write_delta(warehouse, TABLE, raw_rows([0, 1], region="us"))
    mirror.sync_now(TABLE)

    rows = read_rows(TABLE, source="orders", endpoint=endpoint)
    assert rows.column("_twg_offset").to_pylist() == [0, 1, 2, 3, 4, 5]
    assert set(rows.column("_twg_source").to_pylist()) == {"orders"}

    rows = read_rows(TABLE, source="orders", endpoint=endpoint, dedupe=False)
    assert rows.column("_twg_offset").to_pylist() == [0, 0, 1, 1, 2, 3, 4, 4, 5]

    rows = read_rows(
        TABLE,
        source="orders",
        endpoint=endpoint,
        ranges=[OffsetRange(1, 3), OffsetRange(5, 6)],
        columns=["value"],
    )
    assert rows.column_names == ["value", "_twg_offset"]
    assert rows.column("_twg_offset").to_pylist() == [1, 2, 5]

    rows = read_rows(TABLE, source="orders", partition="us", partition_column="region", endpoint=endpoint)
    assert rows.column("_twg_offset").to_pylist() == [0, 1]
    with pytest.raises(ConfigError, match="partition_column"):
        read_rows(TABLE, source="orders", partition="us", endpoint=endpoint)
    assert read_rows(TABLE, source="orders", endpoint=endpoint, ranges=[]).num_rows == 0


def test_reserved_columns_are_required(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, pa.table({"value": [1.0]}))
    mirror.sync_now(TABLE)
    with pytest.raises(ReadbackError, match="_twg_source"):
        verify_coverage(endpoint, TABLE, {_key(): [OffsetRange(0, 1)]}, delta_version=version, policy=FAST)


def test_settings_from_config() -> None:
    config = ReadbackConfig(iceberg_rest_uri="http://h/api/2.1/unity-catalog/iceberg-rest/", wait_timeout_s=9)
    assert IcebergEndpoint.from_config(config).uri == "http://h/api/2.1/unity-catalog/iceberg-rest"
    assert WaitPolicy.from_config(config) == WaitPolicy(timeout_s=9, initial_s=0.2, max_s=5.0)
    with pytest.raises(ConfigError, match="iceberg_rest_uri"):
        IcebergEndpoint.from_config(ReadbackConfig())
    with pytest.raises(ConfigError):
        WaitPolicy(timeout_s=1, initial_s=2, max_s=1)


def test_probe_ahead_of_the_catalog_still_waits_for_the_table(endpoint: IcebergEndpoint) -> None:
    # A production probe (UC converted_delta_version) can run ahead of what REST serves.
    policy = WaitPolicy(timeout_s=0.3, initial_s=0.02, max_s=0.1)
    with pytest.raises(ReadbackTimeoutError, match="did not serve the table"):
        verify_coverage(
            endpoint, "main.raw.absent", {}, delta_version=1, probe=CallableProbe(lambda t: 1), policy=policy
        )


def test_rows_committed_after_the_expected_version_are_waited_for(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    """In production the expected Delta version is a lower bound: Zerobus commits acknowledged rows
    asynchronously. Covered rows that a later commit brings must be waited for, not reported missing."""
    first = write_delta(warehouse, TABLE, raw_rows(list(range(5))))
    mirror.sync_now(TABLE)

    def late_commit() -> None:
        time.sleep(0.3)
        mirror.notify(TABLE, write_delta(warehouse, TABLE, raw_rows(list(range(5, 10)))))

    committer = threading.Thread(target=late_commit)
    committer.start()
    try:
        report = verify_coverage(
            endpoint, TABLE, {_key(): [OffsetRange(0, 10)]}, delta_version=first, policy=FAST
        )
    finally:
        committer.join()
    assert report.verified and report.missing_ranges == () and report.rows_scanned == 10
    assert report.iceberg_delta_version > first


def test_rows_that_never_arrive_are_reported_missing_at_the_deadline(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, raw_rows(list(range(5))))
    mirror.sync_now(TABLE)
    policy = WaitPolicy(timeout_s=0.4, initial_s=0.02, max_s=0.1)
    report = verify_coverage(
        endpoint, TABLE, {_key(): [OffsetRange(0, 8)]}, delta_version=version, policy=policy
    )
    assert not report.verified
    assert report.missing_ranges == (MissingRange(_key(), OffsetRange(5, 8)),)
    assert report.waited_s >= 0.3  # it looked again until the deadline before giving its verdict
