"""``zerobus-orch readback --table T --source S [--partition P]`` finds the latest run of a Dagster write
without its run id (Dagster writes ``<partition key>@<run id>``; the old command looked for the
partition key itself, found nothing and exited 1)."""

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from dagster_defs import ZerobusIOManager, ZerobusResource
from zerobus_orchestration.cli.main import app
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.runtime.registry import close_all_runtimes

DAYS = dg.StaticPartitionsDefinition(["2024-01-01", "2024-01-02"])
ROWS = {"2024-01-01": 30, "2024-01-02": 20}


# append: the second run of a day with other rows is kept beside the first (auto would refuse it on raw)
@dg.asset(
    key=["raw", "visits"],
    partitions_def=DAYS,
    metadata={"partition_expr": "day", "zerobus/write_mode": "append"},
)
def visits(context: dg.AssetExecutionContext) -> pa.Table:
    n = ROWS[context.partition_key]
    return pa.table({"day": [context.partition_key] * n, "visit": pa.array(range(n), pa.int64())})


def _readback(zb_config: ZerobusConfig, *options: str) -> tuple[int, dict[str, object]]:
    args = ["readback", "--table", "main.raw.visits", "--warehouse", zb_config.warehouse, "--json"]
    close_all_runtimes()
    result = CliRunner().invoke(app, [*args, "--wait", "30", *options])
    assert result.stdout, (result.exit_code, result.output, result.exception)
    return result.exit_code, json.loads(result.stdout)


def test_readback_finds_the_latest_run_of_a_dagster_partition(
    zerobus: ZerobusResource, zb_config: ZerobusConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resources = {"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus, catalog="main")}
    first = dg.materialize([visits], resources=resources, partition_key="2024-01-01")
    ROWS["2024-01-01"] = 25  # the second run of the day writes other rows
    second = dg.materialize([visits], resources=resources, partition_key="2024-01-01")
    other = dg.materialize([visits], resources=resources, partition_key="2024-01-02")
    assert first.success and second.success and other.success
    close_all_runtimes()  # the command is another process's read: it starts its own emulator
    monkeypatch.setenv("ZEROBUS_EMULATOR__MODE", "in_process")
    monkeypatch.setenv("ZEROBUS_EMULATOR__ICEBERG_LAG_S", "0.3")

    code, day = _readback(zb_config, "--source", "raw/visits", "--partition", "2024-01-01")
    assert code == 0, day
    assert day["status"] == "verified" and day["latest_run"] == f"2024-01-01@{second.run_id}"
    assert day["expected_rows"] == 25 and day["duplicate_count"] == 0

    # This host wrote them all: its coverage cache names every run of the source, and all are verified.
    code, cached = _readback(zb_config, "--source", "raw/visits")
    assert code == 0 and cached["expected_from"] == "coverage_cache" and cached["expected_rows"] == 75

    # Another host (its own state folder, the same tables): the source's latest run, from the table.
    monkeypatch.setenv("ZEROBUS_STATE_DIR", str(tmp_path / "other_host"))
    code, latest = _readback(zb_config, "--source", "raw/visits")
    assert code == 0 and latest["latest_run"] == f"2024-01-02@{other.run_id}", latest
    assert latest["expected_from"] == "table_truth" and latest["expected_rows"] == 20
    code, day_there = _readback(zb_config, "--source", "raw/visits", "--partition", "2024-01-01")
    assert code == 0 and day_there["latest_run"] == f"2024-01-01@{second.run_id}", day_there

    code, one = _readback(zb_config, "--source", "raw/visits", "--partition", f"2024-01-01@{first.run_id}")
    assert code == 0 and one["expected_rows"] == 30 and "latest_run" not in one  # a named run is that run

    close_all_runtimes()
    args = ["readback", "--table", "main.raw.visits", "--warehouse", zb_config.warehouse]
    missing = CliRunner().invoke(app, [*args, "--source", "raw/visits", "--partition", "2024-01-03"])
    assert (
        missing.exit_code == 1 and "nothing to verify" in missing.output and "'2024-01-03'" in missing.output
    )
