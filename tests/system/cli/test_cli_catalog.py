"""``zerobus-orch plan`` and ``zerobus-orch check`` against a temporary warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.cli.main import app
from zerobus_orchestration.contracts import managed_comment

T = "main.raw.events"
runner = CliRunner()


def write_parquet(path: Path, schema: pa.Schema) -> Path:
    pq.write_table(schema.empty_table(), path)
    return path


def write_ipc(path: Path, schema: pa.Schema) -> Path:
    with ipc.new_file(path, schema) as writer:
        writer.write_table(schema.empty_table())
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_plan_then_apply_then_noop(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    schema_file = write_parquet(
        tmp_path / "s.parquet", pa.schema([("id", pa.int64()), ("amount", pa.uint8())])
    )
    code, out = invoke("plan", "--table", T, "--schema-from", str(schema_file), "--warehouse", wh, "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["applied"] is False and summary["plan"]["steps"][0]["kind"] == "create_table"
    assert LocalCatalog(wh).describe(T) is None  # a plan alone changes nothing

    code, out = invoke("plan", "--table", T, "--schema-from", str(schema_file), "--warehouse", wh, "--apply")
    assert code == 0, out
    assert "create table main.raw.events" in out and "applied" in out
    version = DeltaTable(LocalCatalog(wh).location(T)).version()

    code, out = invoke(
        "plan", "--table", T, "--schema-from", str(schema_file), "--warehouse", wh, "--apply", "--json"
    )
    assert code == 0 and json.loads(out)["plan"]["steps"] == [] and json.loads(out)["applied"] is False
    assert DeltaTable(LocalCatalog(wh).location(T)).version() == version

    code, out = invoke("check", "--table", T, "--warehouse", wh)
    assert code == 0 and "eligible as primary_raw" in out


def test_plan_with_contract_and_ipc_schema(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    schema_file = write_ipc(tmp_path / "s.arrow", pa.schema([("id", pa.int64())]))
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "apiVersion: v3.0.2\nkind: DataContract\nid: c\nversion: 2.0.0\nstatus: active\n"
        "schema:\n  - name: events\n    properties:\n      - name: id\n        description: The id\n",
        encoding="utf-8",
    )
    code, out = invoke(
        "plan",
        "--table",
        T,
        "--schema-from",
        str(schema_file),
        "--contract",
        str(contract),
        "--role",
        "derived",
        "--warehouse",
        wh,
        "--apply",
    )
    assert code == 0, out
    state = LocalCatalog(wh).describe(T)
    assert state is not None and state.column("id").comment == managed_comment("The id")  # type: ignore[union-attr]
    assert state.properties["twg.contract.version"] == "2.0.0"


def test_refused_plan_exits_non_zero_naming_the_column(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    first = write_parquet(tmp_path / "a.parquet", pa.schema([("id", pa.int64()), ("n", pa.int32())]))
    second = write_parquet(tmp_path / "b.parquet", pa.schema([("id", pa.int64()), ("n", pa.string())]))
    assert invoke("plan", "--table", T, "--schema-from", str(first), "--warehouse", wh, "--apply")[0] == 0
    code, out = invoke("plan", "--table", T, "--schema-from", str(second), "--warehouse", wh, "--apply")
    assert code == 1 and "refuse main.raw.events.n" in out and "live INT, desired STRING" in out


def test_check_lists_every_unmet_condition(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    schema_file = write_parquet(tmp_path / "s.parquet", pa.schema([("id", pa.int64())]))
    invoke("plan", "--table", T, "--schema-from", str(schema_file), "--warehouse", wh, "--apply")
    DeltaTable(LocalCatalog(wh).location(T)).alter.set_table_properties(
        {"delta.enableDeletionVectors": "true", "delta.enableIcebergCompatV2": "false"},
        raise_if_not_exists=False,
    )
    code, out = invoke("check", "--table", T, "--warehouse", wh, "--json")
    assert code == 1
    assert json.loads(out)["unmet"] == ["iceberg_reads", "deletion_vectors_disabled"]
    code, out = invoke("check", "--table", "main.raw.missing", "--warehouse", wh)
    assert code == 1 and "registered: UNMET" in out


def test_bad_schema_file_exits_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not arrow")
    code, out = invoke("plan", "--table", T, "--schema-from", str(junk), "--warehouse", str(tmp_path / "wh"))
    assert code == 2 and "not a Parquet file" in out


def test_check_and_plan_read_the_runtime_registry_under_a_separate_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime keeps the local registry at <state_dir>/catalog.sqlite; plan and check must open that
    # one, not <warehouse>/_zerobus/catalog.sqlite, or a table the runtime made reads as unregistered.
    monkeypatch.setenv("ZEROBUS_EMULATOR__TIME_TO_TABLE_S", "0.2")
    wh, state = tmp_path / "wh", tmp_path / "state"
    config = tmp_path / "zerobus.toml"
    config.write_text(f"[zerobus]\nwarehouse = {str(wh)!r}\nstate_dir = {str(state)!r}\n", encoding="utf-8")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "label": ["a", "b", "c"]})
    pq.write_table(data, tmp_path / "rows.parquet")
    code, out = invoke("ingest", "--table", T, "--config", str(config), str(tmp_path / "rows.parquet"))
    assert code == 0, out
    assert (state / "catalog.sqlite").is_file()

    code, out = invoke("check", "--table", T, "--config", str(config), "--json")
    assert code == 0, out
    assert json.loads(out)["unmet"] == []

    code, out = invoke(
        "plan", "--table", T, "--schema-from", str(tmp_path / "rows.parquet"), "--config", str(config)
    )
    assert code == 0 and out.strip() == f"{T}: up to date", out
    assert not (wh / "_zerobus" / "catalog.sqlite").exists()  # no second, empty registry beside it
