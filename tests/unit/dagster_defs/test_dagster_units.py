"""Pure pieces of the Dagster integration: naming, config round trip, metadata, cursor, schema parsing."""

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from pydantic import SecretStr

from dagster_defs import (
    ZerobusResource,
    build_contract_asset,
    build_zerobus_definitions,
    contract_key_for,
    partition_for,
    source_for,
    table_ref,
)
from dagster_defs.handlers import default_type_handlers, handler_for_load, handler_for_output
from dagster_defs.metadata import (
    column_schema_from_arrow,
    descriptions_from_column_schema,
    report_metadata,
    write_metadata,
)
from dagster_defs.naming import RESUME_PARTITION_TAG, RESUME_SOURCE_TAG, AssetOptions, resumed_partition
from dagster_defs.schemas import arrow_schema_from_column_schema, arrow_schema_from_contract
from dagster_defs.sensors import ReadbackCursor, WriteTarget, recovery_run_key
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.runtime.facade import WriteResult


@pytest.mark.parametrize(
    ("key", "schema", "metadata", "expected"),
    [
        (["raw", "orders"], None, {}, "main.raw.orders"),
        (["orders"], None, {}, "main.default.orders"),
        (["orders"], "sales", {}, "main.sales.orders"),
        (["raw", "orders"], "sales", {}, "main.sales.orders"),
        (["a", "raw", "orders"], None, {}, "main.raw.orders"),
        (["raw", "orders"], "sales", {"schema": "bronze"}, "main.bronze.orders"),
        (["raw", "orders"], None, {"zerobus/schema": "bronze"}, "main.bronze.orders"),
        (["raw", "orders"], None, {"zerobus/table": "orders_v2"}, "main.raw.orders_v2"),
        (["raw", "orders"], "x", {"zerobus/table": "cat.s.t"}, "cat.s.t"),
    ],
)
def test_table_name_precedence(
    key: list[str], schema: str | None, metadata: dict[str, str], expected: str
) -> None:
    options = AssetOptions.from_metadata(metadata, where="test")
    ref = table_ref(dg.AssetKey(key), catalog="main", schema=schema, options=options)
    assert ref.full_name == expected


def test_bad_asset_options_name_the_key() -> None:
    with pytest.raises(ConfigError, match="zerobus/role"):
        AssetOptions.from_metadata({"zerobus/role": "gold"}, where="asset raw/orders")
    assert AssetOptions.from_metadata({"zerobus/role": "derived"}, where="x").role is Role.DERIVED


def test_coverage_keys_follow_the_runtime_contract() -> None:
    key = dg.AssetKey(["raw", "orders"])
    assert source_for(key) == "raw/orders"
    assert partition_for("run-1", None) == "@run-1"
    assert partition_for("run-1", "2026-01-01") == "2026-01-01@run-1"
    assert contract_key_for(key) == dg.AssetKey(["raw", "orders__contract"])


def test_recovery_tags_resume_only_the_tagged_source_and_partition_key() -> None:
    tags = {RESUME_SOURCE_TAG: "raw/orders", RESUME_PARTITION_TAG: "2026-01-01@run-1"}
    assert resumed_partition(tags, "raw/orders", "2026-01-01") == "2026-01-01@run-1"
    assert resumed_partition(tags, "raw/other", "2026-01-01") is None, "another asset of the run"
    assert resumed_partition(tags, "raw/orders", "2026-01-02") is None, "another partition of the asset"
    assert resumed_partition({}, "raw/orders", None) is None
    unpartitioned = {RESUME_SOURCE_TAG: "raw/orders", RESUME_PARTITION_TAG: "@run-1"}
    assert resumed_partition(unpartitioned, "raw/orders", None) == "@run-1"


GATED_KEY = dg.AssetKey(["raw", "gated"])
gated_contract = build_contract_asset(GATED_KEY, schema=pa.schema([("id", pa.int64())]))


@dg.asset(key=GATED_KEY, deps=[gated_contract.key])
def gated() -> pa.Table:
    return pa.table({"id": [1]})


@dg.asset(key=GATED_KEY)
def ungated() -> pa.Table:
    return pa.table({"id": [1]})


def test_definitions_refuse_a_data_asset_that_does_not_depend_on_its_contract(tmp_path: Path) -> None:
    resource = ZerobusResource(warehouse=str(tmp_path / "warehouse"), use_environment=False)
    defs = build_zerobus_definitions(assets=[gated], tables=[gated_contract], resource=resource)
    assert defs.resolve_job_def("zerobus_job") is not None
    with pytest.raises(ConfigError, match=r"asset raw/gated does not depend on its contract asset") as info:
        build_zerobus_definitions(assets=[ungated], tables=[gated_contract], resource=resource)
    assert "deps=[dg.AssetKey(['raw', 'gated__contract'])]" in str(info.value)
    with pytest.raises(ConfigError, match=r"raw/gated, which is not in assets="):
        build_zerobus_definitions(assets=[], tables=[gated_contract], resource=resource)


def test_resource_round_trips_a_config_to_the_same_runtime_key(tmp_path: Path) -> None:
    cfg = ZerobusConfig.model_validate(
        {
            "warehouse": str(tmp_path),
            "emulator": {"iceberg_lag_s": 0.3, "time_to_table_s": 0.2},
            "pool": {"min_streams": 2},
            "readback": {"token": "s3cret", "wait_timeout_s": 12.5},
            "storage_options": {"aws_secret_access_key": "k3y"},
        }
    )
    resource = ZerobusResource.from_config(cfg)
    rebuilt = resource.zerobus_config()
    assert rebuilt == cfg
    assert rebuilt.config_hash() == cfg.config_hash()
    assert isinstance(rebuilt.readback.token, SecretStr)
    assert "s3cret" not in json.dumps(rebuilt.effective_config())


def test_resource_fields_win_over_options_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEROBUS_POOL__MIN_STREAMS", "3")
    monkeypatch.setenv("ZEROBUS_WAREHOUSE", "/elsewhere")
    resource = ZerobusResource(warehouse=str(tmp_path), options={"emulator.iceberg_lag_s": "0.5"})
    cfg = resource.zerobus_config()
    assert cfg.warehouse == str(tmp_path)
    assert cfg.pool.min_streams == 3
    assert cfg.emulator.iceberg_lag_s == 0.5
    assert ZerobusResource(use_environment=False).zerobus_config().pool.min_streams == 2  # the default


def _result(**overrides: object) -> WriteResult:
    values: dict[str, object] = {
        "table": "main.raw.orders",
        "source": "raw/orders",
        "partition": "@r1",
        "rows_written": 90,
        "rows_skipped": 10,
        "bytes_written": 2_000_000,
        "payload_bytes": 800_000,
        "offset_start": 10,
        "offset_end": 100,
        "streams_used": 2,
        "coalesce_ratio_p50": 3.0,
        "delivery_latency_p50_s": 0.01,
        "delivery_latency_p99_s": 0.05,
        "delta_version": 4,
        "duration_s": 0.5,
    }
    values.update(overrides)
    return WriteResult(**values)  # type: ignore[arg-type]


def test_write_metadata_uses_standard_keys_and_measured_values() -> None:
    schema = pa.schema([("order_id", pa.int64()), ("_twg_offset", pa.int64())])
    meta = write_metadata(
        _result(),
        full_name="main.raw.orders",
        schema=schema,
        descriptions={"order_id": "the id"},
        uri="/w/main/raw/orders",
        partitioned=True,
    )
    assert meta["dagster/row_count"] == 100
    assert meta["dagster/partition_row_count"] == 100
    assert meta["dagster/table_name"] == "main.raw.orders"
    assert meta["dagster/uri"] == "/w/main/raw/orders"
    columns = meta["dagster/column_schema"].columns
    assert [(c.name, c.type, c.description) for c in columns] == [("order_id", "BIGINT", "the id")]
    assert meta["zerobus/streams_used"] == 2
    assert meta["zerobus/mb_per_s"] == 4.0  # stamped bytes, as sent
    assert meta["zerobus/payload_bytes"] == 800_000
    assert meta["zerobus/payload_mb_per_s"] == 1.6  # the user's own bytes
    assert meta["zerobus/delta_version"] == 4
    assert meta["zerobus/partition"] == "@r1"


def test_write_metadata_reports_unmeasured_latency_as_null() -> None:
    meta = write_metadata(
        _result(
            delivery_latency_p50_s=None,
            delivery_latency_p99_s=None,
            coalesce_ratio_p50=None,
            delta_version=None,
        ),
        full_name="t.t.t",
        schema=pa.schema([("a", pa.int64())]),
        descriptions=None,
        uri=None,
        partitioned=False,
    )
    assert meta["zerobus/delivery_latency_p50_s"] is None
    assert "dagster/partition_row_count" not in meta
    assert "dagster/uri" not in meta and "zerobus/delta_version" not in meta


def test_column_schema_descriptions_round_trip() -> None:
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False), ("b", pa.string())])
    table_schema = column_schema_from_arrow(schema, {"a": "first"})
    assert descriptions_from_column_schema(table_schema) == {"a": "first"}
    assert descriptions_from_column_schema(dg.TableSchemaMetadataValue(table_schema)) == {"a": "first"}
    assert arrow_schema_from_column_schema(table_schema, table="t") == schema


def test_column_schema_with_an_unknown_nested_type_is_refused_with_the_fix() -> None:
    # Nested types are spelled as Databricks spells them (tests/unit/dagster_defs/test_schemas.py).
    bad = dg.TableSchema(columns=[dg.TableColumn("payload", "STRUCT<a: INTEGRAL>")])
    with pytest.raises(ConfigError, match=r"table main.raw.t: column 'payload.a'.*unknown Arrow type"):
        arrow_schema_from_column_schema(bad, table="main.raw.t")


def test_odcs_contract_declares_columns(tmp_path: Path) -> None:
    contract = tmp_path / "orders.odcs.yaml"
    contract.write_text(
        """
apiVersion: v3.0.2
kind: DataContract
id: orders
version: 1.2.0
status: active
schema:
  - name: orders
    properties:
      - name: order_id
        logicalType: integer
        physicalType: BIGINT
        required: true
        description: Order number.
      - name: amount
        logicalType: number
        description: Total.
"""
    )
    schema = arrow_schema_from_contract(contract, table="main.raw.orders")
    assert schema == pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("amount", pa.float64())])


def test_cursor_is_tolerant_and_round_trips() -> None:
    assert ReadbackCursor.parse(None).assets == {}
    assert ReadbackCursor.parse("not json").assets == {}
    assert ReadbackCursor.parse("[1, 2]").assets == {}
    legacy = ReadbackCursor.parse('{"raw/orders": 7}')
    assert legacy.of("raw/orders").verified == 7
    cursor = ReadbackCursor.parse(None)
    cursor.of("raw/orders").verified = 12
    cursor.of("raw/orders").recovery = 11
    again = ReadbackCursor.parse(cursor.dumps())
    assert again.of("raw/orders").verified == 12 and again.of("raw/orders").recovery == 11
    assert recovery_run_key("raw/orders", 12) == "zerobus-readback-recovery:raw/orders:12"


def test_write_target_needs_all_coverage_keys() -> None:
    full = {"zerobus/table": "main.raw.o", "zerobus/source": "raw/o", "zerobus/partition": "@r"}
    assert WriteTarget.from_metadata(full) == WriteTarget("main.raw.o", "raw/o", "@r")
    wrapped = {k: dg.MetadataValue.text(v) for k, v in full.items()}
    assert WriteTarget.from_metadata(wrapped) == WriteTarget("main.raw.o", "raw/o", "@r")
    assert WriteTarget.from_metadata({"zerobus/table": "main.raw.o"}) is None


def test_report_metadata_flattens_nested_values() -> None:
    class Report:
        def as_dict(self) -> dict[str, object]:
            return {"verified": True, "rows_scanned": 3, "missing": [(0, 1)], "table": "t"}

    meta = report_metadata(Report())
    assert meta["readback/verified"] is True
    assert meta["readback/missing"].value == [[0, 1]]


def test_handlers_pick_by_type_and_refuse_unknown_ones() -> None:
    handlers = default_type_handlers()
    assert handler_for_output(handlers, pa.table({"a": [1]}), where="x").name == "pyarrow"
    with pytest.raises(TypeError, match=r"asset a/b.*cannot write a builtins.dict"):
        handler_for_output(handlers, {"a": 1}, where="asset a/b")
    with pytest.raises(TypeError, match="cannot load an input annotated"):
        handler_for_load(handlers, dict, handlers[0], where="input x")


def test_resource_repr_never_shows_secrets(tmp_path: Path) -> None:
    resource = ZerobusResource(
        warehouse=str(tmp_path), client_secret="top-secret-1", options={"readback.token": "top-secret-2"}
    )
    assert "top-secret" not in repr(resource) and "top-secret" not in str(resource)
    cfg = resource.zerobus_config()
    assert isinstance(cfg.client_secret, SecretStr)
    assert "top-secret" not in json.dumps(cfg.effective_config())


def test_resource_defaults_embedded_mode_to_the_shared_emulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ZerobusResource(warehouse=str(tmp_path), use_environment=False).zerobus_config().emulator.mode == (
        "daemon"
    )
    pinned = ZerobusResource(warehouse=str(tmp_path), options={"emulator.mode": "in_process"})
    assert pinned.zerobus_config().emulator.mode == "in_process"
    monkeypatch.setenv("ZEROBUS_EMULATOR__MODE", "in_process")
    assert ZerobusResource(warehouse=str(tmp_path)).zerobus_config().emulator.mode == "in_process"
    # from_config names one exact config: its mode (here the core default) is kept, same runtime key.
    cfg = ZerobusConfig(warehouse=str(tmp_path))
    assert ZerobusResource.from_config(cfg).zerobus_config().config_hash() == cfg.config_hash()
