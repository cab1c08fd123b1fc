"""The Iceberg mirror: real deltalake writes, real pyiceberg reads through the REST facade."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.schema import PrimitiveType
from pyiceberg.catalog.rest import RestCatalog

from tests.support.iceberg_helpers import nested_rows, raw_rows, wait_until, write_delta
from zerobus_orchestration.emulator.errors import MirrorError
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.snapshot_summary import DELTA_TIMESTAMP_KEY, DELTA_VERSION_KEY
from zerobus_orchestration.tables import table_uri, zerobus_dir

TABLE = "main.sales.orders"


def _summary(catalog: RestCatalog, ident: str = "sales.orders") -> dict[str, str]:
    snapshot = catalog.load_table(ident).current_snapshot()
    assert snapshot is not None
    return dict(snapshot.summary.additional_properties)


def _sorted_rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: (r["_twg_offset"], str(r)))


def _delta_rows(warehouse: str, full_name: str) -> list[dict[str, object]]:
    return _sorted_rows(DeltaTable(table_uri(warehouse, full_name)).to_pyarrow_table())


def test_nested_columns_comments_and_layout(
    warehouse: str, mirror: IcebergMirror, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    write_delta(warehouse, TABLE, nested_rows([0, 1, 2]))
    version = write_delta(warehouse, TABLE, nested_rows([3, 4]))

    assert mirror.sync_now(TABLE) == version
    assert mirror.converted_version(TABLE) == version

    catalog = rest_catalog("main")
    table = catalog.load_table("sales.orders")
    scanned = table.scan().to_arrow()
    assert _sorted_rows(scanned) == _delta_rows(warehouse, TABLE)
    assert scanned.num_rows == 5

    schema = table.schema()
    assert schema.find_field("id").doc == "Order id."
    assert schema.find_field("tags").doc == "Free-form tags."
    assert schema.find_field("address.city").doc == "City name."
    assert schema.find_field("attrs").doc is None

    summary = _summary(catalog)
    assert summary[DELTA_VERSION_KEY] == str(version)
    history = DeltaTable(table_uri(warehouse, TABLE)).history(1)[0]
    assert summary[DELTA_TIMESTAMP_KEY] == str(history["timestamp"])

    # UniForm layout: Iceberg metadata/ sits next to _delta_log/, the catalog file in _zerobus/.
    delta_dir = table_uri(warehouse, TABLE)
    assert sorted(os.listdir(delta_dir))[:2] == ["_delta_log", "metadata"]
    assert table.metadata_location.endswith(".metadata.json")
    assert os.path.join(delta_dir, "metadata") in table.metadata_location
    assert os.path.exists(os.path.join(zerobus_dir(warehouse), "iceberg.sqlite"))


def test_additive_schema_evolution_keeps_old_rows_null(
    warehouse: str, mirror: IcebergMirror, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    write_delta(warehouse, TABLE, nested_rows([0, 1]))
    mirror.sync_now(TABLE)
    evolved = nested_rows([2, 3]).append_column(
        pa.field("channel", pa.string(), metadata={"comment": "Sales channel."}), pa.array(["web", "shop"])
    )
    version = write_delta(warehouse, TABLE, evolved, schema_mode="merge")

    assert mirror.sync_now(TABLE) == version
    table = rest_catalog("main").load_table("sales.orders")
    assert table.schema().find_field("channel").doc == "Sales channel."
    rows = {r["_twg_offset"]: r["channel"] for r in table.scan().to_arrow().to_pylist()}
    assert rows == {0: None, 1: None, 2: "web", 3: "shop"}


def test_metadata_only_commit_advances_delta_version(
    warehouse: str, mirror: IcebergMirror, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    write_delta(warehouse, TABLE, nested_rows([0]))
    mirror.sync_now(TABLE)
    dt = DeltaTable(table_uri(warehouse, TABLE))
    dt.alter.add_columns(
        [Field("note", PrimitiveType("string"), nullable=True, metadata={"comment": "Added by DDL."})]
    )
    version = DeltaTable(table_uri(warehouse, TABLE)).version()

    assert mirror.sync_now(TABLE) == version
    catalog = rest_catalog("main")
    assert _summary(catalog)[DELTA_VERSION_KEY] == str(version)
    table = catalog.load_table("sales.orders")
    assert table.schema().find_field("note").doc == "Added by DDL."
    assert table.scan().to_arrow().num_rows == 1


def test_overwrite_removes_old_files(
    warehouse: str, mirror: IcebergMirror, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    write_delta(warehouse, TABLE, nested_rows([0, 1, 2]))
    write_delta(warehouse, TABLE, nested_rows([3]))
    mirror.sync_now(TABLE)
    version = write_delta(warehouse, TABLE, nested_rows([10, 11]), mode="overwrite")

    assert mirror.sync_now(TABLE) == version
    table = rest_catalog("main").load_table("sales.orders")
    assert _sorted_rows(table.scan().to_arrow()) == _delta_rows(warehouse, TABLE)
    assert sorted(r["_twg_offset"] for r in table.scan().to_arrow().to_pylist()) == [10, 11]
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary.operation.value == "overwrite"


def test_notify_converts_after_the_lag(warehouse: str, rest_catalog: Callable[[str], RestCatalog]) -> None:
    lag_s = 1.0
    with IcebergMirror(warehouse, lag_s=lag_s, poll_interval_s=None) as mirror:
        first = write_delta(warehouse, TABLE, nested_rows([0, 1]))
        mirror.sync_now(TABLE)
        catalog = rest_catalog("main")

        second = write_delta(warehouse, TABLE, nested_rows([2, 3, 4]))
        notified_at = time.monotonic()
        mirror.notify(TABLE, second)
        # Right after the commit the REST view still serves the older snapshot.
        converted_before = mirror.converted_version(TABLE)
        summary_before = _summary(catalog)[DELTA_VERSION_KEY]
        rows_before = catalog.load_table("sales.orders").scan().to_arrow().num_rows
        if time.monotonic() - notified_at < lag_s:  # on a starved machine the lag may already be over
            assert (converted_before, summary_before, rows_before) == (first, str(first), 2)

        wait_until(lambda: _summary(catalog)[DELTA_VERSION_KEY] == str(second), what="the lagged snapshot")
        assert time.monotonic() - notified_at >= lag_s
        assert catalog.load_table("sales.orders").scan().to_arrow().num_rows == 5
        assert mirror.converted_version(TABLE) == second


def test_converts_exactly_the_notified_version(warehouse: str) -> None:
    with IcebergMirror(warehouse, lag_s=0.05, poll_interval_s=None) as mirror:
        first = write_delta(warehouse, TABLE, nested_rows([0]))
        write_delta(warehouse, TABLE, nested_rows([1]))  # committed, but not yet notified
        mirror.notify(TABLE, first)
        wait_until(lambda: mirror.converted_version(TABLE) == first, what="version 0")
        table = mirror.load_iceberg_table(TABLE)
        assert [r["_twg_offset"] for r in table.scan().to_arrow().to_pylist()] == [0]


def test_polling_mirrors_commits_nobody_notified(warehouse: str) -> None:
    write_delta(warehouse, TABLE, nested_rows([0]))
    with IcebergMirror(warehouse, lag_s=0.05, poll_interval_s=0.05) as mirror:
        mirror.watch(TABLE)
        version = write_delta(warehouse, TABLE, nested_rows([1, 2]))
        wait_until(lambda: mirror.converted_version(TABLE) == version, what="polled conversion")
        assert mirror.load_iceberg_table(TABLE).scan().to_arrow().num_rows == 3


def test_a_failing_table_does_not_stop_the_thread(warehouse: str) -> None:
    bad = "main.sales.partitioned"
    write_deltalake(table_uri(warehouse, bad), raw_rows([0, 1]), partition_by=["region"])
    with IcebergMirror(warehouse, lag_s=0.01, poll_interval_s=None) as mirror:
        mirror.notify(bad, 0)
        wait_until(lambda: mirror.error_count(bad) >= 1, what="the recorded failure")
        error = mirror.last_error(bad)
        assert error is not None and "MirrorError" in error and "partitioned" in error
        assert mirror.converted_version(bad) == -1

        good = write_delta(warehouse, TABLE, nested_rows([0]))
        mirror.notify(TABLE, good)
        wait_until(lambda: mirror.converted_version(TABLE) == good, what="the healthy table")
        assert mirror.last_error(TABLE) is None

        with pytest.raises(MirrorError, match="partitioned by"):
            mirror.sync_now(bad)


def test_restarted_mirror_reads_its_progress_back(warehouse: str) -> None:
    version = write_delta(warehouse, TABLE, nested_rows([0, 1]))
    with IcebergMirror(warehouse, lag_s=0.01, poll_interval_s=None) as mirror:
        mirror.sync_now(TABLE)
    restarted = IcebergMirror(warehouse, lag_s=0.01, poll_interval_s=None)
    assert restarted.converted_version(TABLE) == version
    assert restarted.sync_now(TABLE) == version  # idempotent: nothing new to convert
    assert len(restarted.load_iceberg_table(TABLE).snapshots()) == 1


def test_tables_of_different_catalogs_stay_apart(
    warehouse: str, mirror: IcebergMirror, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    write_delta(warehouse, "main.sales.orders", nested_rows([0]))
    write_delta(warehouse, "dev.sales.orders", nested_rows([0, 1, 2]))
    mirror.sync_now("main.sales.orders")
    mirror.sync_now("dev.sales.orders")
    assert rest_catalog("main").load_table("sales.orders").scan().to_arrow().num_rows == 1
    assert rest_catalog("dev").load_table("sales.orders").scan().to_arrow().num_rows == 3
    assert mirror.catalog_names() == ["dev", "main"]


def test_relative_warehouse_is_recorded_as_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    version = write_delta("wh", TABLE, nested_rows([0]))
    mirror = IcebergMirror("wh", poll_interval_s=None)
    assert mirror.sync_now(TABLE) == version
    table = mirror.load_iceberg_table(TABLE)
    assert table.metadata.location == str(tmp_path / "wh" / "main" / "sales" / "orders")
    assert (tmp_path / "wh" / "_zerobus" / "iceberg.sqlite").exists()
