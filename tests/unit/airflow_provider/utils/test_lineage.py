"""How an ingested table and its sources are named for Airflow assets, OpenLineage and the UI link."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider.utils.connection import ConnectionFields, config_from_connection
from airflow_provider.utils.lineage import (
    DatasetName,
    SchemaTap,
    alias_name,
    columns_of,
    file_dataset,
    table_asset_uri,
    table_identity,
    workspace_host,
)
from zerobus_orchestration.errors import TableNameError


def _remote(workspace_url: str) -> object:
    fields = ConnectionFields(
        conn_id="zb",
        conn_type="zerobus",
        host="https://123.zerobus.us-west-2.cloud.databricks.com",
        login="client-id",
        password="client-secret",
        extra={"workspace_url": workspace_url, "warehouse_id": "wh"},
    )
    return config_from_connection(fields)


def test_a_remote_table_is_named_like_the_databricks_provider_names_it() -> None:
    identity = table_identity(_remote("https://dbc-1a2b.cloud.databricks.com/"), "Main.Raw.Orders")  # type: ignore[arg-type]
    assert identity.asset_uri == "databricks://dbc-1a2b.cloud.databricks.com/main/raw/orders"
    assert (identity.namespace, identity.dataset_name) == (
        "databricks://dbc-1a2b.cloud.databricks.com",
        "main.raw.orders",
    )
    assert identity.explorer_url == "https://dbc-1a2b.cloud.databricks.com/explore/data/main/raw/orders"


def test_an_embedded_table_uses_localhost_and_has_no_link() -> None:
    config = config_from_connection(ConnectionFields(conn_id="local", extra={"embedded": True}))
    identity = table_identity(config, "main.raw.orders")
    assert (
        identity.asset_uri == table_asset_uri("main.raw.orders") == "databricks://localhost/main/raw/orders"
    )
    assert identity.explorer_url is None


def test_a_workspace_port_is_kept_and_credentials_in_the_url_are_not() -> None:
    assert workspace_host("http://user:pw@127.0.0.1:8443/path") == "127.0.0.1:8443"
    assert workspace_host("dbc-9.cloud.databricks.com") == "dbc-9.cloud.databricks.com"
    with pytest.raises(ValueError, match="has no host"):
        workspace_host("https://")


def test_a_bad_table_name_is_refused_by_the_table_name_rules() -> None:
    with pytest.raises(TableNameError, match="three non-empty parts"):
        table_asset_uri("raw.orders")


def test_files_follow_the_openlineage_naming_spec() -> None:
    assert file_dataset("/data/in/a.parquet") == DatasetName("file", "/data/in/a.parquet")
    assert file_dataset("file:///data/in/a.csv") == DatasetName("file", "/data/in/a.csv")
    assert file_dataset("s3://bucket/landing/a.parquet") == DatasetName("s3://bucket", "landing/a.parquet")
    assert file_dataset("gs://b/x.arrow") == DatasetName("gs://b", "x.arrow")
    assert file_dataset("relative.csv").name.endswith("/relative.csv")


def test_columns_use_the_table_types_and_leave_out_reserved_columns() -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("_twg_offset", pa.int64()),
        ]
    )
    columns = columns_of(schema, {"id": "order id", "tags": "  "})
    assert [(c.name, c.type, c.description) for c in columns] == [
        ("id", "BIGINT", "order id"),
        ("tags", "ARRAY<STRING>", None),
    ]


def test_the_schema_tap_passes_batches_through_and_keeps_the_first_schema() -> None:
    batches = [pa.record_batch({"a": [1, 2]}), pa.record_batch({"a": [3]})]
    tap = SchemaTap(iter(batches))
    assert tap.schema is None
    assert list(tap) == batches
    assert tap.schema == batches[0].schema


def test_the_alias_is_named_after_the_table_as_written() -> None:
    assert alias_name("main.raw.{{ params.t }}") == "zerobus:main.raw.{{ params.t }}"
