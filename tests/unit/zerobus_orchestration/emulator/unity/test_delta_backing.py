"""The local Unity Catalog's metastore backed by real Delta tables (deltalake on a temporary folder)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.emulator.errors import EmulatorError
from zerobus_orchestration.emulator.unity.local_cloud import STATE_FILE_NAME, local_workspace
from zerobus_orchestration.emulator.unity.state import StatementFailure
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace
from zerobus_orchestration.tables import table_uri

TABLE = "main.raw.events"


def workspace(warehouse: Path) -> UnityWorkspace:
    ws = local_workspace(str(warehouse), warehouse / "_zerobus" / STATE_FILE_NAME)
    ws.execute_sql("CREATE SCHEMA IF NOT EXISTS main.raw")  # as on Databricks, a table needs its schema
    return ws


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


def delta(warehouse: Path, name: str = TABLE) -> DeltaTable:
    return DeltaTable(table_uri(str(warehouse), name))


def test_create_table_makes_the_delta_table_where_zerobus_writes_declaring_what_delta_rs_cannot(
    warehouse: Path,
) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(
        f"CREATE TABLE {TABLE} (id BIGINT NOT NULL COMMENT 'key', at TIMESTAMP_NTZ) COMMENT 'raw events' "
        "TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true', "
        "'delta.universalFormat.enabledFormats' = 'iceberg', 'delta.enableDeletionVectors' = 'false', "
        "'twg.role' = 'primary_raw')"
    )
    dt = delta(warehouse)
    fields = {f.name: f for f in dt.schema().fields}
    assert list(fields) == ["id", "at"] and not fields["id"].nullable
    assert fields["id"].metadata["comment"] == "key"
    assert dt.metadata().description == "raw events"
    configuration = dt.metadata().configuration
    assert configuration["twg.role"] == "primary_raw"
    assert "delta.columnMapping.mode" not in configuration  # delta-rs could not evolve the table
    assert dt.protocol().reader_features in (None, ["timestampNtz"])

    table = ws.table(TABLE)
    assert table is not None and table.table_id == dt.metadata().id
    assert table.storage_location == table_uri(str(warehouse), TABLE)
    detail = table.describe_detail_row()
    assert {"columnMapping", "icebergCompatV2", "timestampNtz"} <= set(detail["tableFeatures"])
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (3, 7)


def test_alter_statements_change_the_delta_table_and_a_refused_one_changes_nothing(warehouse: Path) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT, name STRING)")
    ws.execute_sql(f"ALTER TABLE {TABLE} ADD COLUMNS (score DOUBLE COMMENT 'points')")
    ws.execute_sql(f"ALTER TABLE {TABLE} ALTER COLUMN name COMMENT 'who'")
    ws.execute_sql(f"ALTER TABLE {TABLE} SET TBLPROPERTIES ('twg.owner' = 'team-a')")
    ws.execute_sql(f"COMMENT ON TABLE {TABLE} IS 'described'")
    version = delta(warehouse).version()
    with pytest.raises(StatementFailure, match="FIELD_ALREADY_EXISTS"):
        ws.execute_sql(f"ALTER TABLE {TABLE} ADD COLUMNS (extra INT, score DOUBLE)")
    dt = delta(warehouse)
    assert dt.version() == version, "a refused statement committed to Delta"
    fields = {f.name: f for f in dt.schema().fields}
    assert list(fields) == ["id", "name", "score"]
    assert fields["name"].metadata["comment"] == "who" and fields["score"].metadata["comment"] == "points"
    assert dt.metadata().configuration["twg.owner"] == "team-a"
    assert dt.metadata().description == "described"
    info = ws.table(TABLE)
    assert info is not None and info.version == dt.version()


def test_type_changes_are_refused_before_anything_is_written(warehouse: Path) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(f"CREATE TABLE {TABLE} (id INT) TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    with pytest.raises(StatementFailure, match="delta-rs has no type widening"):
        ws.execute_sql(f"ALTER TABLE {TABLE} ALTER COLUMN id TYPE BIGINT")
    assert [f.type.type for f in delta(warehouse).schema().fields] == ["integer"]
    table = ws.table(TABLE)
    assert table is not None and table.column("id") is not None
    assert "enableTypeWidening" not in str(delta(warehouse).metadata().configuration)


def test_reads_show_what_the_delta_table_holds_now(warehouse: Path) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT)")
    # Another writer evolves the table (the embedded local backend, a merge append).
    batch = pa.table({"id": pa.array([1], pa.int64()), "late": ["x"]})
    write_deltalake(table_uri(str(warehouse), TABLE), batch, mode="append", schema_mode="merge")
    info = ws.table(TABLE)
    assert info is not None
    assert [c.name for c in info.columns] == ["id", "late"]
    assert info.version == delta(warehouse).version() == 1


def test_unknown_catalogs_are_refused_and_created_ones_are_kept(warehouse: Path) -> None:
    ws = workspace(warehouse)
    with pytest.raises(StatementFailure, match=r"^\[NO_SUCH_CATALOG_EXCEPTION\] Catalog 'dev' was not found"):
        ws.execute_sql("CREATE TABLE dev.s.t (id BIGINT)")
    assert not (warehouse / "dev").exists()
    ws.execute_sql("CREATE CATALOG IF NOT EXISTS dev")
    ws.execute_sql("CREATE SCHEMA dev.s")
    with pytest.raises(StatementFailure, match="SCHEMA_ALREADY_EXISTS"):
        ws.execute_sql("CREATE SCHEMA dev.s")
    ws.execute_sql("CREATE TABLE dev.s.t (id BIGINT)")
    again = workspace(warehouse)
    assert again.metastore.catalog_names() == ["dev", "main"]
    assert again.metastore.schema_names("dev") == ["s"]


def test_the_records_survive_a_restart(warehouse: Path) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(
        f"CREATE TABLE {TABLE} (id BIGINT) TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'twg.x' = '1')"
    )
    ws.execute_sql("CREATE TABLE main.raw.outside (id BIGINT) LOCATION 's3://elsewhere/t'")
    before = ws.table(TABLE)
    assert before is not None
    again = workspace(warehouse)
    after = again.table(TABLE)
    assert after is not None
    assert (after.table_id, after.properties["delta.columnMapping.mode"]) == (before.table_id, "name")
    assert "columnMapping" in after.features
    external = again.table("main.raw.outside")
    assert external is not None and external.table_type == "EXTERNAL"
    assert [(c.name, c.nullable) for c in external.columns] == [("id", True)]


def test_delta_tables_made_by_something_else_are_adopted(warehouse: Path) -> None:
    write_deltalake(table_uri(str(warehouse), "main.old.t"), pa.table({"x": pa.array([1], pa.int32())}))
    ws = workspace(warehouse)
    assert [t.name for t in ws.metastore.list("main", "old")] == ["t"]
    adopted = ws.table("main.old.t")
    assert adopted is not None and adopted.table_id == delta(warehouse, "main.old.t").metadata().id
    assert adopted.table_info()["columns"][0]["type_text"] == "int"
    assert workspace(warehouse).table("main.old.t") is not None


def test_drop_removes_the_managed_table_so_it_is_not_adopted_again(warehouse: Path) -> None:
    ws = workspace(warehouse)
    ws.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT)")
    ws.execute_sql(f"DROP TABLE {TABLE}")
    assert not Path(table_uri(str(warehouse), TABLE)).exists()
    assert ws.table(TABLE) is None and workspace(warehouse).table(TABLE) is None
    ws.execute_sql(f"CREATE TABLE {TABLE} (other STRING)")
    assert [f.name for f in delta(warehouse).schema().fields] == ["other"]


def test_configured_catalogs_exist_and_a_catalog_holding_a_table_stays_known(warehouse: Path) -> None:
    configured = local_workspace(str(warehouse), warehouse / "state.json", catalogs=("main", "dev"))
    configured.execute_sql("CREATE SCHEMA dev.s")
    configured.execute_sql("CREATE TABLE dev.s.t (id BIGINT)")
    write_deltalake(table_uri(str(warehouse), "ops.x.t"), pa.table({"x": [1]}))
    ws = workspace(warehouse)
    assert ws.table("ops.x.t") is not None
    ws.execute_sql("CREATE TABLE ops.x.u (id BIGINT)")
    assert ws.metastore.catalog_names() == ["main", "ops"]


def test_unreadable_records_stop_the_start_naming_the_file_and_the_fix(warehouse: Path) -> None:
    state = warehouse / "_zerobus" / STATE_FILE_NAME
    state.parent.mkdir(parents=True)
    state.write_text('{"tables": [{"catalog": "main"}]}')
    with pytest.raises(EmulatorError, match=rf"{STATE_FILE_NAME} cannot be read .*Fix: restore the file"):
        workspace(warehouse)
