"""The quickstart example loads as Dagster definitions, and the demo runs it end to end on the emulator."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from dagster_defs import ZerobusResource
from dagster_defs.demo import run_dagster_demo
from dagster_defs.quickstart import ORDERS_KEY, build_definitions, order_batches
from zerobus_orchestration.config import ZerobusConfig

REPO = Path(__file__).resolve().parents[3]


def test_example_definitions_wire_contract_checks_sensor_and_job(zb_config: ZerobusConfig) -> None:
    defs = build_definitions(ZerobusResource.from_config(zb_config))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"raw/orders__contract", "raw/orders", "analytics/daily_order_totals"}
    check_names = {k.name for k in graph.asset_check_keys}
    assert "deletion_vectors_disabled" in check_names and len(check_names) == 5
    assert defs.resolve_sensor_def("zerobus_readback") is not None
    assert defs.resolve_job_def("zerobus_job") is not None


def test_synthetic_orders_are_deterministic_and_sized() -> None:
    batches = list(order_batches(10_000, 4_096))
    assert [b.num_rows for b in batches] == [4_096, 4_096, 1_808]
    again = list(order_batches(10_000, 4_096))
    assert all(a.equals(b) for a, b in zip(batches, again, strict=True))
    assert batches[0].schema.field("order_id").nullable is False


@pytest.mark.slow  # the dagster CLI in its own process
def test_dagster_definitions_validate_cli() -> None:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "definitions",
            "validate",
            "-m",
            "dagster_defs.quickstart",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


@pytest.mark.slow
def test_demo_streams_verifies_and_measures(zb_config: ZerobusConfig) -> None:
    messages: list[str] = []
    summary = run_dagster_demo(zb_config, 20_000, messages.append)
    assert summary["success"] is True
    assert summary["rows_written"] == 20_000
    assert summary["rows_read_back"] == 20_000
    assert summary["verified"] is True
    assert summary["checks_passed"] == summary["checks_total"] == 5
    assert summary["streams"] >= 1
    assert 0 < summary["payload_mb_per_s"] < summary["mb_per_s"]  # the user's bytes, then as sent
    assert summary["delivery_latency_p99_s"] >= summary["delivery_latency_p50_s"] > 0
    assert summary["iceberg_lag_s"] is not None and summary["iceberg_lag_s"] >= 0
    assert summary["derived_table"] == "main.analytics.daily_order_totals"
    assert summary["derived_rows"] == 30  # the synthetic orders span 30 days
    assert any("read-back" in m for m in messages)
    assert ORDERS_KEY.to_user_string() == "raw/orders"


@pytest.mark.slow
def test_cli_job_runs_contract_checks_and_write_and_the_process_exits(tmp_path: Path) -> None:
    """A run in a fresh process (as ``dagster dev`` run workers do) gates on the checks and then ends: the
    embedded runtime closes before the interpreter joins the emulator's threads."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    home = tmp_path / "dagster_home"
    home.mkdir()
    run_config = tmp_path / "run.yaml"
    run_config.write_text('{"ops": {"raw__orders": {"config": {"rows": 3000}}}}')
    env.update(
        {
            "DAGSTER_HOME": str(home),
            "ZEROBUS_WAREHOUSE": str(tmp_path / "warehouse"),
            "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.3",
            "ZEROBUS_EMULATOR__MODE": "in_process",  # this test is about the in-process emulator's exit
        }
    )
    done = subprocess.run(
        [
            sys.executable, "-m", "dagster", "job", "execute",
            "-m", "examples.dagster_quickstart.definitions", "-j", "zerobus_job", "-c", str(run_config),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "RUN_SUCCESS" in output
    assert "Asset check 'deletion_vectors_disabled' on 'raw/orders__contract' passed" in output
    assert 'Handled output "result" using IO manager "io_manager"' in output
