"""Read-back in the production configuration, against the emulator's local cloud.

Host A writes with the production settings (remote endpoint, workspace URL, service principal, the
``unity`` backend); host C, with a state folder and warehouse of its own, verifies. C has no record and
no coverage cache, so the delivered ranges come from the table (read with the credentials Unity vends);
Iceberg is read through Unity's Iceberg REST path as the service principal, with a bearer header that
``databricks-sdk`` refreshes (OAuth M2M), never a static token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from zerobus_orchestration.cli.main import app
from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.readback.auth import DatabricksOAuthHeader
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.readback_service import UC_ICEBERG_REST_PATH, ExpectedFrom, ReadbackService
from zerobus_orchestration.runtime.registry import close_all_runtimes

TABLE = "main.mh.events"
READBACK = {"wait_timeout_s": 20, "poll_initial_s": 0.05, "poll_max_s": 0.3}


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch, isolated_databricks_env: None) -> Iterator[None]:
    """No proxy for loopback (the SDKs tunnel even 127.0.0.1 through *_proxy), no developer profile."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy", "GRPC_PROXY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    yield
    close_all_runtimes()


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(str(tmp_path / "cloud"), EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0)) as emu:
        yield emu


def _host(emu: Emulator, root: Path) -> ZerobusConfig:
    return ZerobusConfig(
        endpoint=emu.endpoint,
        workspace_url=emu.workspace_url,
        client_id=emu.client_id,
        client_secret=emu.client_secret,
        warehouse=str(root / "wh"),
        state_dir=str(root / "state"),
        catalog={"backend": "unity", "sql_warehouse_id": emu.sql_warehouse_id},
        readback=READBACK,
    )


def _write_on_host_a(emu: Emulator, tmp_path: Path, rows: int) -> None:
    runtime = ZerobusRuntime(_host(emu, tmp_path / "host-a"))
    try:
        written = runtime.write(
            TABLE, pa.table({"id": pa.array(range(rows), pa.int64())}), source="mh", partition="p1"
        )
        assert written.rows_written == rows
    finally:
        runtime.close()


def test_another_host_verifies_from_the_table_as_the_service_principal(
    cloud: Emulator, tmp_path: Path
) -> None:
    _write_on_host_a(cloud, tmp_path, 500)
    service = ReadbackService.from_config(_host(cloud, tmp_path / "host-c"))
    try:
        endpoint = service.iceberg()
        assert endpoint.uri == cloud.workspace_url + UC_ICEBERG_REST_PATH
        assert endpoint.token is None and isinstance(endpoint.header, DatabricksOAuthHeader)

        outcome = service.verify(TABLE, source="mh", partition="p1")

        assert outcome.status is ReadbackStatus.VERIFIED, outcome.message
        report = outcome.report or {}
        assert report["expected_from"] == ExpectedFrom.TABLE.value and report["expected_rows"] == 500
        assert report["rows_scanned"] == 500 and outcome.duplicate_count == 0 and not outcome.missing_ranges
        assert not (tmp_path / "host-c" / "state" / "coverage.sqlite").exists()
    finally:
        service.close()


def test_the_cli_on_host_c_verifies_with_only_the_production_variables(
    cloud: Emulator, tmp_path: Path
) -> None:
    _write_on_host_a(cloud, tmp_path, 300)
    host_c = tmp_path / "host-c"
    env = {
        "ZEROBUS_ENDPOINT": cloud.endpoint,
        "ZEROBUS_WORKSPACE_URL": cloud.workspace_url,
        "ZEROBUS_CLIENT_ID": cloud.client_id,
        "ZEROBUS_CLIENT_SECRET": cloud.client_secret,
        "ZEROBUS_CATALOG__BACKEND": "unity",
        "ZEROBUS_CATALOG__SQL_WAREHOUSE_ID": cloud.sql_warehouse_id,
        "ZEROBUS_STATE_DIR": str(host_c / "state"),
        "ZEROBUS_WAREHOUSE": str(host_c / "wh"),
        "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
    }
    args = ["readback", "--table", TABLE, "--source", "mh", "--partition", "p1", "--wait", "20"]

    human = CliRunner().invoke(app, args, env=env)
    assert human.exit_code == 0, human.output
    assert "verified" in human.stdout and "the table's Delta log" in human.stdout

    done = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "verified" and summary["verified"] is True
    assert summary["missing_ranges"] == [] and summary["rows_scanned"] == 300
    assert summary["expected_from"] == "table_truth" and summary["duplicate_count"] == 0
    assert cloud.client_secret not in done.stdout
