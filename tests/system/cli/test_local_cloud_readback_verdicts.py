"""Lost apart from late, with the production configuration unchanged against ``zerobus-orch serve``.

The service runs ``serve --json``; writer and readers run ``zerobus-orch`` with only the ``ZEROBUS_*``
variables of the production path (remote endpoint, OAuth M2M client, ``unity`` catalog with its SQL
warehouse) and state folders of their own. No process holds an emulator handle, so nothing but the
table itself tells lost from late:

* rows deleted from a verified partition, through the local cloud's SQL warehouse (``DELETE`` over the
  databricks-sdk client), are ``lost`` on the first snapshot that shows the delete, naming the Delta
  version and operation that removed them, from the writer's host (its coverage cache) and from a host
  with nothing of its own (the table's truth); before, the reader said "not all visible yet" until its
  ``--wait`` ran out;
* rows the service acknowledged and has not committed yet (emulator fault ``delay_commit``) are not
  lost: read-back waits, and verifies once they are committed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.service.sql import StatementState
from deltalake import DeltaTable

from tests.support.local_cloud import clean_env, production_env, run_cli, serve
from zerobus_orchestration.catalog.unity import workspace_client
from zerobus_orchestration.emulator.advert import http_json
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration

SECRET = "local-cloud-readback-secret"
LOST_TABLE = "main.verdicts.events"
LATE_TABLE = "main.verdicts.late_events"
ROWS = 5_000
HOLD_S = 25.0  # the late rows' commit delay: the ingest and a 3 s read-back fit in it (an assert checks)
WAIT_S = 120  # a read-back's deadline: a verdict that waited it out would show in waited_s


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("verdicts_cloud")
    # Faults armed over HTTP while it runs (tests only: zerobus.emulator.faults_enabled).
    env = clean_env() | {
        "ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET,
        "ZEROBUS_EMULATOR__FAULTS_ENABLED": "true",
    }
    with serve(str(root / "cloud"), env) as info:
        yield info


def _host(cloud: dict[str, object], root: Path) -> dict[str, str]:
    return clean_env() | production_env(cloud, SECRET, root) | {"ZEROBUS_READBACK__POLL_INITIAL_S": "0.1"}


def _ingest(env: dict[str, str], table: str, data: Path, partition: str = "p1") -> dict[str, object]:
    args = ["ingest", "--table", table, "--source", "mh", "--partition", partition, str(data), "--json"]
    wrote = run_cli(env, *args, timeout=300)
    assert wrote.returncode == 0, wrote.stderr[-3000:]
    result: dict[str, object] = json.loads(wrote.stdout)
    assert result["rows_written"] == ROWS
    return result


def _readback(
    env: dict[str, str], table: str, wait_s: float, partition: str = "p1"
) -> tuple[int, dict[str, object]]:
    args = ["readback", "--table", table, "--source", "mh", "--partition", partition, "--wait", str(wait_s)]
    done = run_cli(env, *args, "--json", timeout=300)
    return done.returncode, json.loads(done.stdout)


def _input(path: Path) -> Path:
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64()), "kind": ["k"] * ROWS}), path)
    return path


def _client(cloud: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> WorkspaceClient:
    """The databricks-sdk client of the local cloud, as the service principal (no proxy for 127.0.0.1)."""
    for var in [v for v in os.environ if "proxy" in v.lower()]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return workspace_client(
        str(cloud["workspace_url"]), client_id=str(cloud["client_id"]), client_secret=SECRET
    )


def _sql(client: WorkspaceClient, cloud: dict[str, object], statement: str) -> None:
    """``statement`` on the local cloud's SQL warehouse."""
    response = client.statement_execution.execute_statement(
        statement=statement, warehouse_id=str(cloud["sql_warehouse_id"]), wait_timeout="30s"
    )
    assert response.status is not None and response.status.state == StatementState.SUCCEEDED, response


def _arm(client: WorkspaceClient, cloud: dict[str, object], fault: dict[str, object]) -> None:
    """Arm ``fault`` on the running service (``serve --enable-faults``), authenticated as the client."""
    status, body = http_json(
        f"{cloud['workspace_url']}/_emulator/faults",
        method="POST",
        body=json.dumps(fault).encode(),
        authorization=client.config.authenticate()["Authorization"],
    )
    assert status == 200, body


def test_rows_deleted_through_the_sql_warehouse_are_lost_at_once_from_any_host(
    tmp_path: Path, cloud: dict[str, object], isolated_databricks_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _host(cloud, tmp_path / "host_a")
    _ingest(writer, LOST_TABLE, _input(tmp_path / "events.parquet"))
    code, verified = _readback(writer, LOST_TABLE, WAIT_S)
    assert code == 0 and verified["status"] == "verified", verified

    # Someone deletes 50 of the partition's rows with plain SQL.
    client = _client(cloud, monkeypatch)
    _sql(client, cloud, f"DELETE FROM {LOST_TABLE} WHERE _twg_offset >= 100 AND _twg_offset < 150")
    served = DeltaTable(table_uri(str(cloud["warehouse"]), LOST_TABLE))
    deleted_at = served.version()
    assert served.history(limit=1)[0]["operation"] == "DELETE"
    assert served.to_pyarrow_dataset().count_rows() == ROWS - 50

    # The writer's host knows what it delivered (its coverage cache): the 50 rows are lost, at once.
    code, lost = _readback(writer, LOST_TABLE, WAIT_S)
    assert code == 1 and lost["status"] == "lost", lost
    assert float(str(lost["waited_s"])) < WAIT_S / 4  # the first snapshot showing the delete decided
    assert lost["expected_from"] == "coverage_cache"
    (gone,) = lost["lost_ranges"]  # type: ignore[misc]
    assert (gone["start"], gone["end"], gone["cause"]) == (100, 150, "deleted")
    assert (gone["removed_at_version"], gone["operation"]) == (deleted_at, "DELETE")
    message = str(lost["message"])
    assert LOST_TABLE in message and "50 delivered row(s)" in message and "LOST" in message
    assert f"positions 100..149 deleted by Delta version {deleted_at} (DELETE)" in message
    assert "docs/runbook.md" in message

    # A host with no record and no cache reads what was delivered from the table itself: the hole the
    # delete left is lost too (before, "not durable: a write did not finish").
    code, truth = _readback(_host(cloud, tmp_path / "host_c"), LOST_TABLE, WAIT_S)
    assert code == 1 and truth["status"] == "lost", truth
    assert truth["expected_from"] == "table_truth"
    (hole,) = truth["lost_ranges"]  # type: ignore[misc]
    assert (hole["start"], hole["end"], hole["removed_at_version"]) == (100, 150, deleted_at)
    assert truth["not_durable_ranges"] == []

    # The human form names the verdict and the fix too.
    human = run_cli(
        writer, "readback", "--table", LOST_TABLE, "--source", "mh", "--partition", "p1", timeout=300
    )
    assert human.returncode == 1 and "NOT verified (lost)" in human.stdout, human.stdout + human.stderr
    assert f"deleted by Delta version {deleted_at} (DELETE)" in human.stdout

    # The fix the message and docs/runbook.md give: deliver again with resume off, keep one copy of each.
    key = ["--table", LOST_TABLE, "--source", "mh", "--partition", "p1"]
    assert "--no-resume" in message and "repair --dedupe" in message
    again = run_cli(
        writer, "ingest", *key, "--no-resume", str(tmp_path / "events.parquet"), "--json", timeout=300
    )
    assert again.returncode == 0 and json.loads(again.stdout)["rows_written"] == ROWS, again.stderr[-3000:]
    code, doubled = _readback(writer, LOST_TABLE, WAIT_S)
    assert code == 1 and doubled["status"] == "duplicated", doubled
    repaired = run_cli(writer, "repair", "--dedupe", *key, "--json", timeout=300)
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    code, verified = _readback(writer, LOST_TABLE, WAIT_S)
    assert code == 0 and verified["status"] == "verified" and verified["rows_scanned"] == ROWS, verified


@pytest.mark.slow  # waits out the service's commit delay (HOLD_S)
def test_rows_acknowledged_and_not_committed_yet_are_waited_for_not_lost(
    tmp_path: Path, cloud: dict[str, object], isolated_databricks_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _host(cloud, tmp_path / "host_a")
    _ingest(writer, LATE_TABLE, _input(tmp_path / "first.parquet"), partition="p0")
    code, first = _readback(writer, LATE_TABLE, WAIT_S, partition="p0")
    assert code == 0 and first["status"] == "verified", first

    # From now on the service commits the table's acknowledged batches HOLD_S late.
    held = {"kind": "delay_commit", "table": LATE_TABLE, "delay_s": HOLD_S, "streams": 8}
    _arm(_client(cloud, monkeypatch), cloud, held)
    started = time.monotonic()
    _ingest(writer, LATE_TABLE, _input(tmp_path / "late.parquet"))

    # The fault acted: every row of p1 acknowledged, none in the table yet.
    served = table_uri(str(cloud["warehouse"]), LATE_TABLE)
    assert DeltaTable(served).to_pyarrow_dataset().count_rows() == ROWS  # p0's only
    code, late = _readback(writer, LATE_TABLE, 3)
    assert time.monotonic() - started < HOLD_S, "the check ran after the hold ended: raise HOLD_S"
    # The snapshot (p0's rows) lacks p1, and the Delta log shows p1 in no version: late, not lost.
    assert code == 1 and late["status"] == "incomplete", late
    assert late["missing_rows"] == ROWS and late["lost_ranges"] == [], late
    assert "LOST" not in str(late["message"])

    # Waited for, they arrive once the service commits them.
    code, verified = _readback(writer, LATE_TABLE, WAIT_S)
    assert code == 0 and verified["status"] == "verified", verified
    assert verified["rows_scanned"] == ROWS
    assert DeltaTable(served).to_pyarrow_dataset().count_rows() == 2 * ROWS
