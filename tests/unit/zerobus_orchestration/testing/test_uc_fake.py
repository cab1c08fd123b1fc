"""The fake Unity Catalog, driven by the real databricks-sdk client (PAT and OAuth M2M)."""

from __future__ import annotations

import json

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import NotFound, PermissionDenied, Unauthenticated
from databricks.sdk.service.catalog import ColumnTypeName, TableOperation, TableType
from databricks.sdk.service.sql import StatementResponse, StatementState

from zerobus_orchestration.catalog.ddl import string_literal
from zerobus_orchestration.catalog.unity import workspace_client
from zerobus_orchestration.emulator.unity.state import StatementFailure
from zerobus_orchestration.testing import FakeUnityCatalog
from zerobus_orchestration.type_map import quote_identifier

UNIFORM_PROPS = (
    "TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true', "
    "'delta.universalFormat.enabledFormats' = 'iceberg', 'delta.enableDeletionVectors' = 'false')"
)


@pytest.fixture
def w(fake_uc: FakeUnityCatalog) -> WorkspaceClient:
    return workspace_client(fake_uc.url, token=fake_uc.pat, retry_timeout_seconds=5)


def sql(w: WorkspaceClient, uc: FakeUnityCatalog, statement: str) -> StatementResponse:
    return w.statement_execution.execute_statement(statement=statement, warehouse_id=uc.warehouse_id)


def error_of(response: StatementResponse) -> str:
    assert response.status is not None and response.status.error is not None
    return response.status.error.message or ""


def detail(w: WorkspaceClient, uc: FakeUnityCatalog, table: str) -> dict[str, str | None]:
    response = sql(w, uc, f"DESCRIBE DETAIL {table}")
    assert response.manifest is not None and response.manifest.schema is not None
    assert response.result is not None and response.result.data_array is not None
    names = [c.name for c in response.manifest.schema.columns or []]
    return dict(zip(names, response.result.data_array[0], strict=True))  # type: ignore[arg-type]


def test_pat_client_reads_table_info_with_uc_shapes(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    response = sql(
        w,
        fake_uc,
        "CREATE TABLE main.raw.events (id BIGINT NOT NULL COMMENT 'pk', amount DECIMAL(12,2), "
        "tags ARRAY<STRING>, s STRUCT<a: INT, b: STRING>) USING DELTA",
    )
    assert response.status is not None and response.status.state is StatementState.SUCCEEDED
    info = w.tables.get("main.raw.events")
    assert info.table_type is TableType.MANAGED
    assert info.data_source_format is not None and info.data_source_format.value == "DELTA"
    assert info.table_id and info.storage_location and info.table_id in info.storage_location
    cols = {c.name: c for c in info.columns or []}
    assert [c.position for c in info.columns or []] == [0, 1, 2, 3]
    assert cols["id"].type_text == "bigint" and cols["id"].type_name is ColumnTypeName.LONG
    assert cols["id"].nullable is False and cols["id"].comment == "pk"
    assert json.loads(cols["id"].type_json or "") == {
        "name": "id",
        "type": "long",
        "nullable": False,
        "metadata": {"comment": "pk"},
    }
    assert cols["amount"].type_text == "decimal(12,2)"
    assert (cols["amount"].type_precision, cols["amount"].type_scale) == (12, 2)
    assert json.loads(cols["tags"].type_json or "")["type"] == {
        "type": "array",
        "elementType": "string",
        "containsNull": True,
    }
    assert cols["s"].type_text == "struct<a:int,b:string>"
    assert [t.full_name for t in w.tables.list("main", "raw")] == ["main.raw.events"]


def test_missing_table_is_not_found_with_uc_error_code(w: WorkspaceClient) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        w.tables.get("main.raw.nope")
    with pytest.raises(NotFound) as info:
        w.api_client.do("GET", "/api/2.1/unity-catalog/tables/main.raw.nope")
    assert info.value.error_code == "TABLE_DOES_NOT_EXIST"


def test_uniform_create_gets_real_protocol_and_features(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, f"CREATE TABLE main.raw.u (id BIGINT) {UNIFORM_PROPS}")
    row = detail(w, fake_uc, "main.raw.u")
    assert (row["minReaderVersion"], row["minWriterVersion"]) == ("2", "7")
    assert json.loads(row["tableFeatures"] or "") == ["columnMapping", "icebergCompatV2"]
    props = json.loads(row["properties"] or "")
    assert props["delta.columnMapping.mode"] == "name"  # enabled with IcebergCompatV2 at CREATE
    raw = w.api_client.do("GET", "/api/2.1/unity-catalog/tables/main.raw.u")
    assert isinstance(raw, dict)
    assert raw["delta_uniform_iceberg"]["converted_delta_version"] == 0


def test_plain_create_has_legacy_protocol(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.p (id BIGINT)")
    row = detail(w, fake_uc, "main.raw.p")
    assert (row["minReaderVersion"], row["minWriterVersion"], row["tableFeatures"]) == ("1", "2", "[]")
    raw = w.api_client.do("GET", "/api/2.1/unity-catalog/tables/main.raw.p")
    assert isinstance(raw, dict) and "delta_uniform_iceberg" not in raw


def test_deletion_vectors_on_uniform_table_fail_and_change_nothing(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, f"CREATE TABLE main.raw.u (id BIGINT) {UNIFORM_PROPS}")
    before = w.tables.get("main.raw.u").properties
    response = sql(
        w, fake_uc, "ALTER TABLE main.raw.u SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    assert response.status is not None and response.status.state is StatementState.FAILED
    assert error_of(response).startswith(
        "[DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_SHOULD_BE_DISABLED]"
    )
    assert w.tables.get("main.raw.u").properties == before


def test_unknown_table_and_bad_syntax_fail_with_error_classes(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    missing = sql(w, fake_uc, "ALTER TABLE main.raw.nope ADD COLUMNS (a INT)")
    assert missing.status is not None and missing.status.error is not None
    assert (
        missing.status.error.error_code is not None and missing.status.error.error_code.value == "NOT_FOUND"
    )
    assert error_of(missing).startswith("[TABLE_OR_VIEW_NOT_FOUND]")
    garbage = sql(w, fake_uc, "ALTER TABLE WHERE")
    assert error_of(garbage).startswith("[PARSE_SYNTAX_ERROR]")
    unsupported = sql(w, fake_uc, "SELECT 1")
    assert error_of(unsupported).startswith("[UNSUPPORTED_STATEMENT]")


def test_alter_statements_apply_to_state(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.t (id INT, name STRING)")
    ok = [
        "ALTER TABLE main.raw.t ADD COLUMNS (extra DOUBLE COMMENT 'x', flag BOOLEAN)",
        "ALTER TABLE main.raw.t ADD COLUMN more DATE",
        "ALTER TABLE main.raw.t ALTER COLUMN name COMMENT " + string_literal("it's a \\ 'name'\nline two"),
        "COMMENT ON COLUMN main.raw.t.id IS 'the id'",
        "ALTER TABLE main.raw.t SET TBLPROPERTIES ('twg.owner' = 'team-a', 'delta.enableTypeWidening' = 'true')",
        "ALTER TABLE main.raw.t ALTER COLUMN id TYPE BIGINT",
    ]
    for statement in ok:
        response = sql(w, fake_uc, statement)
        assert response.status is not None and response.status.state is StatementState.SUCCEEDED, statement
    info = w.tables.get("main.raw.t")
    cols = {c.name: c for c in info.columns or []}
    assert list(cols) == ["id", "name", "extra", "flag", "more"]
    assert cols["id"].type_text == "bigint" and cols["id"].comment == "the id"
    assert cols["name"].comment == "it's a \\ 'name'\nline two"
    assert cols["extra"].comment == "x"
    assert info.properties is not None and info.properties["twg.owner"] == "team-a"
    assert "typeWidening" in json.loads(detail(w, fake_uc, "main.raw.t")["tableFeatures"] or "")
    history = sql(w, fake_uc, "DESCRIBE HISTORY main.raw.t LIMIT 1")
    assert history.result is not None and history.result.data_array is not None
    assert history.result.data_array[0][0] == str(len(ok))  # CREATE is version 0, one version per statement


def test_doubled_quote_escape_is_a_syntax_error(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    # Databricks reads 'it''s' as two adjacent literals ("its"): the fake refuses it so renderers notice.
    sql(w, fake_uc, "CREATE TABLE main.raw.t (id INT)")
    response = sql(w, fake_uc, "ALTER TABLE main.raw.t ALTER COLUMN id COMMENT 'it''s'")
    assert error_of(response).startswith("[PARSE_SYNTAX_ERROR]")


def test_failed_multi_column_add_is_atomic(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.t (id INT)")
    response = sql(w, fake_uc, "ALTER TABLE main.raw.t ADD COLUMNS (a INT, id STRING)")
    assert error_of(response).startswith("[FIELD_ALREADY_EXISTS]")
    assert [c.name for c in w.tables.get("main.raw.t").columns or []] == ["id"]
    not_null = sql(w, fake_uc, "ALTER TABLE main.raw.t ADD COLUMNS (b INT NOT NULL)")
    assert not_null.status is not None and not_null.status.state is StatementState.FAILED


def test_type_change_needs_type_widening_and_iceberg_legality(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.p (i INT, f FLOAT)")
    assert error_of(sql(w, fake_uc, "ALTER TABLE main.raw.p ALTER COLUMN i TYPE BIGINT")).startswith(
        "[NOT_SUPPORTED_CHANGE_COLUMN]"
    )
    sql(w, fake_uc, f"CREATE TABLE main.raw.u (i INT, f FLOAT) {UNIFORM_PROPS}")
    sql(w, fake_uc, "ALTER TABLE main.raw.u SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    assert error_of(sql(w, fake_uc, "ALTER TABLE main.raw.u ALTER COLUMN i TYPE DOUBLE")).startswith(
        "[DELTA_ICEBERG_COMPAT_VIOLATION.UNSUPPORTED_TYPE_WIDENING]"
    )
    ok = sql(w, fake_uc, "ALTER TABLE main.raw.u ALTER COLUMN f TYPE DOUBLE")
    assert ok.status is not None and ok.status.state is StatementState.SUCCEEDED


def test_uniform_requires_compat_and_compat_needs_column_mapping_on_existing_tables(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.p (id INT)")
    formats_only = sql(
        w,
        fake_uc,
        "ALTER TABLE main.raw.p SET TBLPROPERTIES ('delta.universalFormat.enabledFormats' = 'iceberg')",
    )
    assert error_of(formats_only).startswith("[DELTA_UNIVERSAL_FORMAT_VIOLATION]")
    compat = sql(
        w, fake_uc, "ALTER TABLE main.raw.p SET TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true')"
    )
    assert error_of(compat).startswith("[DELTA_ICEBERG_COMPAT_VIOLATION.WRONG_REQUIRED_TABLE_PROPERTY]")
    both = sql(
        w,
        fake_uc,
        "ALTER TABLE main.raw.p SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.enableIcebergCompatV2' = 'true', 'delta.universalFormat.enabledFormats' = 'iceberg')",
    )
    assert both.status is not None and both.status.state is StatementState.SUCCEEDED


def test_fault_hook_fails_the_matching_statement_only(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.t (id INT)")
    fake_uc.fail_next_statement("INTERNAL_ERROR", "warehouse exploded", matching="ADD COLUMNS")
    assert sql(w, fake_uc, "DESCRIBE DETAIL main.raw.t").status.state is StatementState.SUCCEEDED  # type: ignore[union-attr]
    failed = sql(w, fake_uc, "ALTER TABLE main.raw.t ADD COLUMNS (a INT)")
    assert "warehouse exploded" in error_of(failed)
    assert [c.name for c in w.tables.get("main.raw.t").columns or []] == ["id"]  # not executed
    again = sql(w, fake_uc, "ALTER TABLE main.raw.t ADD COLUMNS (a INT)")
    assert again.status is not None and again.status.state is StatementState.SUCCEEDED


def test_pending_statements_are_polled_to_completion(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    fake_uc.statement_pending_polls = 2
    first = w.statement_execution.execute_statement(
        statement="CREATE TABLE main.raw.t (id INT)", warehouse_id=fake_uc.warehouse_id, wait_timeout="0s"
    )
    assert first.status is not None and first.status.state is StatementState.PENDING
    assert first.statement_id is not None
    states = [w.statement_execution.get_statement(first.statement_id).status.state for _ in range(3)]  # type: ignore[union-attr]
    assert states == [StatementState.RUNNING, StatementState.RUNNING, StatementState.SUCCEEDED]


def test_unknown_warehouse_is_not_found(w: WorkspaceClient) -> None:
    with pytest.raises(NotFound, match="warehouse"):
        w.statement_execution.execute_statement(statement="SELECT 1", warehouse_id="nope")


def test_temporary_credentials_read_only_for_managed_tables(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.t (id INT)")
    table_id = w.tables.get("main.raw.t").table_id
    assert table_id is not None
    creds = w.temporary_table_credentials.generate_temporary_table_credentials(
        table_id=table_id, operation=TableOperation.READ
    )
    assert creds.aws_temp_credentials is not None and creds.aws_temp_credentials.session_token
    assert creds.expiration_time is not None and creds.url is not None and table_id in creds.url
    with pytest.raises(PermissionDenied, match="managed table"):
        w.temporary_table_credentials.generate_temporary_table_credentials(
            table_id=table_id, operation=TableOperation.READ_WRITE
        )


def test_location_makes_an_external_table_that_may_vend_read_write(
    w: WorkspaceClient, fake_uc: FakeUnityCatalog
) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.ext (id INT) USING DELTA LOCATION 's3://lake/ext/'")
    info = w.tables.get("main.raw.ext")
    assert info.table_type is TableType.EXTERNAL and info.storage_location == "s3://lake/ext"
    assert info.table_id is not None
    creds = w.temporary_table_credentials.generate_temporary_table_credentials(
        table_id=info.table_id, operation=TableOperation.READ_WRITE
    )
    assert creds.aws_temp_credentials is not None and creds.url == "s3://lake/ext"
    sql(w, fake_uc, "ALTER TABLE main.raw.ext ADD COLUMNS (name STRING)")  # evolving keeps it external
    assert w.tables.get("main.raw.ext").table_type is TableType.EXTERNAL


def test_uniform_conversion_can_lag(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, f"CREATE TABLE main.raw.u (id BIGINT) {UNIFORM_PROPS}")
    fake_uc.hold_uniform_conversion = True
    assert fake_uc.simulate_commit("main.raw.u") == 1

    def converted() -> int:
        raw = w.api_client.do("GET", "/api/2.1/unity-catalog/tables/main.raw.u")
        assert isinstance(raw, dict)
        return int(raw["delta_uniform_iceberg"]["converted_delta_version"])

    assert converted() == 0
    assert fake_uc.convert_uniform("main.raw.u") == 1
    assert converted() == 1


def test_oauth_m2m_uses_token_endpoint_and_reuses_a_fresh_token(fake_uc: FakeUnityCatalog) -> None:
    w = workspace_client(
        fake_uc.url, client_id=fake_uc.client_id, client_secret=fake_uc.client_secret, retry_timeout_seconds=5
    )
    for _ in range(3):
        with pytest.raises(NotFound):
            w.tables.get("main.raw.nope")
    assert fake_uc.tokens_issued == 1
    api_calls = [r for r in fake_uc.requests if r.path.startswith("/api/")]
    assert api_calls and {r.auth for r in api_calls} == {"oauth"}
    assert any(r.path == "/oidc/v1/token" and r.auth == "basic" for r in fake_uc.requests)


def test_oauth_m2m_refreshes_a_token_near_expiry(isolated_databricks_env: None) -> None:
    # The SDK treats a token with < 40 s left as expired: a 30 s token is replaced on every call.
    with FakeUnityCatalog(token_ttl_s=30) as uc:
        w = workspace_client(
            uc.url, client_id=uc.client_id, client_secret=uc.client_secret, retry_timeout_seconds=5
        )
        for _ in range(3):
            with pytest.raises(NotFound):
                w.tables.get("main.raw.nope")
        assert uc.tokens_issued >= 3
        assert {r.auth for r in uc.requests if r.path.startswith("/api/")} == {"oauth"}


def test_bad_credentials_are_refused(fake_uc: FakeUnityCatalog) -> None:
    w = workspace_client(fake_uc.url, token="dapi-wrong", retry_timeout_seconds=5)
    with pytest.raises(Unauthenticated):
        w.tables.get("main.raw.t")
    bad_secret = workspace_client(
        fake_uc.url, client_id=fake_uc.client_id, client_secret="wrong", retry_timeout_seconds=5
    )
    with pytest.raises(Exception, match="invalid_client"):
        bad_secret.tables.get("main.raw.t")


def test_direct_execute_sql_hook_matches_rest_view(fake_uc: FakeUnityCatalog) -> None:
    fake_uc.execute_sql("CREATE TABLE main.raw.t (id INT COMMENT 'human')")
    table = fake_uc.table("MAIN.raw.T")
    assert table is not None and table.columns[0].comment == "human"


def test_table_comment_drop_and_delete(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    sql(w, fake_uc, "CREATE TABLE main.raw.a (id INT) COMMENT 'created'")
    assert w.tables.get("main.raw.a").comment == "created"
    sql(w, fake_uc, "COMMENT ON TABLE main.raw.a IS 'changed'")
    assert w.tables.get("main.raw.a").comment == "changed"
    assert sql(w, fake_uc, "DROP TABLE main.raw.a").status.state is StatementState.SUCCEEDED  # type: ignore[union-attr]
    assert error_of(sql(w, fake_uc, "DROP TABLE main.raw.a")).startswith("[TABLE_OR_VIEW_NOT_FOUND]")
    assert sql(w, fake_uc, "DROP TABLE IF EXISTS main.raw.a").status.state is StatementState.SUCCEEDED  # type: ignore[union-attr]
    sql(w, fake_uc, "CREATE TABLE main.raw.b (id INT)")
    assert error_of(sql(w, fake_uc, "CREATE TABLE main.raw.b (id INT)")).startswith(
        "[TABLE_OR_VIEW_ALREADY_EXISTS]"
    )
    assert (
        sql(w, fake_uc, "CREATE TABLE IF NOT EXISTS main.raw.b (x INT)").status.state
        is StatementState.SUCCEEDED
    )  # type: ignore[union-attr]
    w.tables.delete("main.raw.b")
    with pytest.raises(NotFound):
        w.tables.get("main.raw.b")


def test_shipped_pytest_plugin_fixture_serves_the_sdk(fake_unity_catalog: FakeUnityCatalog) -> None:
    import os

    assert not any(v.startswith("DATABRICKS_") and v != "DATABRICKS_CONFIG_FILE" for v in os.environ)
    w = workspace_client(fake_unity_catalog.url, token=fake_unity_catalog.pat, retry_timeout_seconds=5)
    fake_unity_catalog.execute_sql("CREATE TABLE main.raw.t (id INT)")
    assert w.tables.get("main.raw.t").full_name == "main.raw.t"


@pytest.mark.parametrize("char", list(" ,;{}()\n\t="), ids=repr)
def test_names_needing_column_mapping_fail_create_and_add_without_it(
    fake_uc: FakeUnityCatalog, char: str
) -> None:
    name = quote_identifier(f"order{char}id")
    with pytest.raises(StatementFailure) as created:
        fake_uc.execute_sql(f"CREATE TABLE main.raw.t (id INT, {name} STRING)")
    assert created.value.error_class == "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES"
    assert f"Invalid column names: {name}." in str(created.value)
    assert fake_uc.table("main.raw.t") is None  # the failed CREATE left nothing behind

    fake_uc.execute_sql("CREATE TABLE main.raw.t (id INT)")
    with pytest.raises(StatementFailure, match=r"^\[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES\]"):
        fake_uc.execute_sql(f"ALTER TABLE main.raw.t ADD COLUMNS (ok INT, {name} STRING)")
    table = fake_uc.table("main.raw.t")
    assert table is not None and [c.name for c in table.columns] == ["id"] and table.version == 0


def test_nested_field_names_are_checked_too(fake_uc: FakeUnityCatalog) -> None:
    with pytest.raises(StatementFailure) as info:
        fake_uc.execute_sql(
            "CREATE TABLE main.raw.t (id INT, lines ARRAY<STRUCT<`unit price`: DOUBLE>>, "
            "attrs MAP<STRING, STRUCT<ok: INT, `a=b`: INT>>)"
        )
    assert info.value.error_class == "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES"
    assert "Invalid column names: lines.`unit price`, attrs.`a=b`." in str(info.value)


def test_column_mapping_allows_those_names(w: WorkspaceClient, fake_uc: FakeUnityCatalog) -> None:
    mapped = sql(
        w,
        fake_uc,
        "CREATE TABLE main.raw.m (`order id` INT, s STRUCT<`unit price`: DOUBLE>) "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
    )
    assert mapped.status is not None and mapped.status.state is StatementState.SUCCEEDED
    sql(w, fake_uc, "CREATE TABLE main.raw.p (id INT)")
    refused = sql(w, fake_uc, "ALTER TABLE main.raw.p ADD COLUMNS (`order id` INT)")
    assert refused.status is not None and refused.status.state is StatementState.FAILED
    assert error_of(refused).startswith("[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES]")
    # Turning column mapping on for a live table is what Databricks documents; then the add passes.
    sql(w, fake_uc, "ALTER TABLE main.raw.p SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    added = sql(w, fake_uc, "ALTER TABLE main.raw.p ADD COLUMNS (`order id` INT)")
    assert added.status is not None and added.status.state is StatementState.SUCCEEDED
    assert [c.name for c in w.tables.get("main.raw.p").columns or []] == ["id", "order id"]
