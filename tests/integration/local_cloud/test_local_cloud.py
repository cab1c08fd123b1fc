"""The emulator's workspace URL as a local cloud: ``databricks-sdk`` OAuth M2M, Unity Catalog over the real
Delta tables, SQL DDL, temporary table credentials, state kept across a restart.

Everything is driven through the real clients: ``databricks-sdk`` (through the ``unity`` backend's own
``workspace_client``) for the workspace APIs, the official Zerobus SDK for the rows, deltalake to check
what landed on disk.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import NotFound, PermissionDenied, ResourceDoesNotExist
from databricks.sdk.service.catalog import TableOperation
from databricks.sdk.service.sql import StatementResponse, StatementState
from deltalake import DeltaTable

from tests.support.emulator_helpers import open_arrow
from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.unity import UnityCatalog, workspace_client
from zerobus_orchestration.catalog.unity_sql import StatementPolling
from zerobus_orchestration.config import EmulatorConfig, Role
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.storage import Access
from zerobus_orchestration.tables import table_uri

TABLE = "main.cloud.events"
FAST = StatementPolling(wait_timeout="5s", poll_initial_s=0.01, poll_max_s=0.05, deadline_s=10.0)
CONFIG = EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0)


def client(emu: Emulator) -> WorkspaceClient:
    """What ``catalog.backend = unity`` builds from ``workspace_url``, ``client_id``, ``client_secret``."""
    return workspace_client(
        emu.workspace_url, client_id=emu.client_id, client_secret=emu.client_secret, retry_timeout_seconds=5
    )


def sql(w: WorkspaceClient, emu: Emulator, statement: str) -> StatementResponse:
    return w.statement_execution.execute_statement(statement, emu.sql_warehouse_id, wait_timeout="5s")


def succeeded(response: StatementResponse) -> None:
    assert response.status is not None and response.status.state is StatementState.SUCCEEDED, response.status


def test_databricks_sdk_oauth_m2m_finds_the_token_endpoint(tmp_path: Path) -> None:
    # Before the local cloud, building the client failed: "oauth-m2m: Invalid URL 'None'" (no OIDC discovery).
    with Emulator(str(tmp_path / "wh"), CONFIG, iceberg=False) as emu:
        w = client(emu)
        assert w.config.workspace_id
        assert w.config.oidc_endpoints is not None
        assert w.config.oidc_endpoints.token_endpoint == emu.workspace_url + "/oidc/v1/token"
        with pytest.raises(NotFound):
            w.tables.get(TABLE)
        assert [c.name for c in w.catalogs.list()] == ["main"]


def test_sql_ddl_makes_and_changes_the_delta_table_zerobus_writes(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    with Emulator(str(warehouse), CONFIG, iceberg=False) as emu:
        w = client(emu)
        succeeded(sql(w, emu, "CREATE SCHEMA main.cloud"))
        succeeded(sql(w, emu, f"CREATE TABLE {TABLE} (id BIGINT NOT NULL COMMENT 'key', name STRING)"))
        uri = table_uri(str(warehouse), TABLE)
        delta = DeltaTable(uri)
        assert [f.name for f in delta.schema().fields] == ["id", "name"]

        # The wire schema of (id BIGINT NOT NULL, name STRING): docs/architecture.md#the-wire-contract.
        schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.large_string())])
        stream = open_arrow(emu, TABLE, schema)
        stream.wait_for_offset(
            stream.ingest_batch(pa.record_batch({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=schema))
        )
        stream.close()
        emu.materialize_now(TABLE)

        succeeded(sql(w, emu, f"ALTER TABLE {TABLE} ADD COLUMNS (score DOUBLE COMMENT 'points')"))
        succeeded(sql(w, emu, f"COMMENT ON COLUMN {TABLE}.name IS 'who'"))
        succeeded(sql(w, emu, f"ALTER TABLE {TABLE} SET TBLPROPERTIES ('twg.owner' = 'team-a')"))
        delta = DeltaTable(uri)
        fields = {f.name: f for f in delta.schema().fields}
        assert list(fields) == ["id", "name", "score"]
        assert fields["name"].metadata["comment"] == "who" and fields["score"].metadata["comment"] == "points"
        assert delta.metadata().configuration["twg.owner"] == "team-a"

        info = w.tables.get(TABLE)
        assert info.storage_location == uri and info.table_id == delta.metadata().id
        assert [(c.name, c.type_text, c.comment) for c in info.columns or ()] == [
            ("id", "bigint", "key"),
            ("name", "string", "who"),
            ("score", "double", "points"),
        ]
        assert (info.properties or {})["twg.owner"] == "team-a"

        creds = w.temporary_table_credentials.generate_temporary_table_credentials(
            table_id=info.table_id, operation=TableOperation.READ
        )
        assert creds.url == uri and creds.aws_temp_credentials is not None
        assert sorted(DeltaTable(creds.url).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
        with pytest.raises(PermissionDenied):  # managed Delta: READ only, as Unity Catalog
            w.temporary_table_credentials.generate_temporary_table_credentials(
                table_id=info.table_id, operation=TableOperation.READ_WRITE
            )


def test_the_unity_backend_reconciles_a_primary_raw_table_on_the_local_cloud(tmp_path: Path) -> None:
    with Emulator(str(tmp_path / "wh"), CONFIG, iceberg=False) as emu:
        catalog = UnityCatalog(client(emu), emu.sql_warehouse_id, polling=FAST)
        schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("payload", pa.string())])
        outcome = catalog.reconcile(TABLE, DesiredTable.build(TABLE, schema, Role.PRIMARY_RAW))
        assert outcome.applied
        state = catalog.describe(TABLE)
        assert state is not None and state.role is Role.PRIMARY_RAW
        # Declared as on Databricks (the preconditions read these), while the Delta table stays plain.
        assert {"columnMapping", "icebergCompatV2"} <= state.protocol.writer_features
        assert DeltaTable(state.location).protocol().min_writer_version < 7
        assert catalog.plan(TABLE, DesiredTable.build(TABLE, schema, Role.PRIMARY_RAW)).empty
        read = catalog.vend_credentials(TABLE, Access.READ)
        assert read.url == state.location


def test_the_metastore_survives_a_restart_and_adopts_tables_made_by_the_local_backend(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    local = LocalCatalog(str(warehouse))
    local.reconcile(
        "main.old.made_locally",
        DesiredTable.build("main.old.made_locally", pa.schema([("x", pa.int32())]), Role.DERIVED),
    )
    local_id = DeltaTable(table_uri(str(warehouse), "main.old.made_locally")).metadata().id
    with Emulator(str(warehouse), CONFIG, iceberg=False) as emu:
        w = client(emu)
        assert [t.name for t in w.tables.list("main", "old")] == ["made_locally"]
        assert w.tables.get("main.old.made_locally").table_id == local_id
        succeeded(sql(w, emu, "CREATE CATALOG dev"))
        succeeded(sql(w, emu, "CREATE SCHEMA dev.s"))
        succeeded(
            sql(
                w,
                emu,
                "CREATE TABLE dev.s.t (id BIGINT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            )
        )
        created = w.tables.get("dev.s.t")
    with Emulator(str(warehouse), CONFIG, iceberg=False) as emu:
        w = client(emu)
        again = w.tables.get("dev.s.t")
        assert again.table_id == created.table_id
        # Declared on the record (what Databricks reports); never put on the Delta table delta-rs reads.
        assert (again.properties or {})["delta.enableDeletionVectors"] == "true"
        assert (
            "delta.enableDeletionVectors" not in DeltaTable(again.storage_location).metadata().configuration
        )
        assert sorted(c.name for c in w.catalogs.list()) == ["dev", "main"]
        assert w.tables.get("main.old.made_locally").table_id == local_id


def test_it_refuses_what_databricks_refuses(tmp_path: Path) -> None:
    with Emulator(str(tmp_path / "wh"), CONFIG, iceberg=False) as emu:
        w = client(emu)
        failed = sql(w, emu, "CREATE TABLE nowhere.s.t (id BIGINT)")
        assert failed.status is not None and failed.status.state is StatementState.FAILED
        assert failed.status.error is not None and "[NO_SUCH_CATALOG_EXCEPTION]" in (
            failed.status.error.message or ""
        )
        assert not (tmp_path / "wh" / "nowhere").exists()
        with pytest.raises(ResourceDoesNotExist, match="zerobus-local-warehouse"):
            w.statement_execution.execute_statement(
                "CREATE TABLE main.s.t (id BIGINT)", "some-other-warehouse"
            )
        missing = sql(w, emu, "CREATE TABLE IF NOT EXISTS main.s.t (id INT)")
        assert missing.status is not None and missing.status.state is StatementState.FAILED
        assert missing.status.error is not None and (missing.status.error.message or "").startswith(
            "[SCHEMA_NOT_FOUND] The schema `main`.`s` cannot be found."
        )
        assert not (tmp_path / "wh" / "main" / "s").exists()
        succeeded(sql(w, emu, "CREATE SCHEMA IF NOT EXISTS main.s"))
        succeeded(sql(w, emu, "CREATE SCHEMA IF NOT EXISTS main.s"))
        succeeded(sql(w, emu, "CREATE TABLE main.s.t (id INT)"))
        widen = sql(w, emu, "ALTER TABLE main.s.t ALTER COLUMN id TYPE BIGINT")
        assert widen.status is not None and widen.status.state is StatementState.FAILED
        assert [
            f.type.type for f in DeltaTable(table_uri(str(tmp_path / "wh"), "main.s.t")).schema().fields
        ] == ["integer"]
