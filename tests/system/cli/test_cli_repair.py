"""``zerobus-orch repair --dedupe`` through the real CLI (subprocesses), on the embedded default and on the
local cloud (the ``unity`` backend, whose SQL warehouse runs the one ``INSERT INTO ... REPLACE WHERE``):
read-back says DUPLICATED, a dry run changes nothing, the repair keeps one copy of each row in one commit,
and read-back then verifies."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.iceberg_helpers import wait_until
from tests.support.local_cloud import clean_env, production_env, run_cli, serve
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration

TABLE = "main.raw.clicks"
SECRET = "repair-test-secret"


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _input(path: Path, ids: range) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]}), path)
    return str(path)


def _positions(uri: str) -> Counter[tuple[str, int]]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["_twg_source", "_twg_offset"])
    pairs = zip(table["_twg_source"].to_pylist(), table["_twg_offset"].to_pylist(), strict=True)
    return Counter(pairs)


@pytest.fixture
def embedded(tmp_path: Path) -> dict[str, str]:
    return clean_env() | {
        "ZEROBUS_WAREHOUSE": str(tmp_path / "wh"),
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.2",
        "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2",
        "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
    }


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[dict[str, object]]:
    env = clean_env() | {"ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET, "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2"}
    with serve(str(tmp_path / "cloud"), env) as info:
        yield info


def _duplicate_then_repair(env: dict[str, str], tmp_path: Path, served: str) -> None:
    data = _input(tmp_path / "clicks.parquet", range(200))
    # --mode append: partition d1 as given, so --no-resume re-sends under the same tag (auto would make
    # each command a new run of d1, and the second one a no-op)
    ingest = [
        "ingest",
        "--table",
        TABLE,
        "--source",
        "web",
        "--partition",
        "d1",
        "--mode",
        "append",
        "--json",
        data,
    ]
    assert run_cli(env, *ingest).returncode == 0
    # Re-sent without resuming: positions 0..199 of web[d1] land twice (what at-least-once leaves).
    assert run_cli(env, *ingest, "--no-resume").returncode == 0
    other = [
        "ingest",
        "--table",
        TABLE,
        "--source",
        "app",
        "--json",
        _input(tmp_path / "app.parquet", range(5)),
    ]
    assert run_cli(env, *other).returncode == 0
    # Each ingest returns once its rows are durable; the service commits them to Delta a moment later:
    # all 405 rows, web[d1]'s 200 positions twice and app's 5 once.
    wait_until(lambda: _positions(served).total() == 405, 60, "every ingested row in the table")
    assert set(_positions(served).values()) == {1, 2}

    readback = [
        "readback",
        "--table",
        TABLE,
        "--source",
        "web",
        "--partition",
        "d1",
        "--json",
        "--wait",
        "60",
    ]
    duplicated = run_cli(env, *readback)
    assert duplicated.returncode == 1, duplicated.stderr
    assert _json(duplicated)["status"] == "duplicated" and _json(duplicated)["duplicate_count"] == 200

    version = DeltaTable(served).version()
    dry = run_cli(env, "repair", "--dedupe", "--table", TABLE, "--source", "web", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert (_json(dry)["duplicate_rows"], _json(dry)["removed_rows"]) == (200, 0)
    assert _json(dry)["ranges"] == {"web[d1]": [[0, 200]]}
    assert DeltaTable(served).version() == version  # a dry run changes nothing

    done = run_cli(env, "repair", "--dedupe", "--table", TABLE, "--source", "web", "--partition", "d1")
    assert done.returncode == 0, done.stderr
    assert f"{TABLE}: removed 200 duplicate row(s) in 1 source tag(s)" in done.stdout
    after = DeltaTable(served)
    assert after.version() == version + 1  # one commit
    positions = _positions(served)
    assert set(positions.values()) == {1}  # every position once
    assert sorted(o for (tag, o) in positions if tag == "web[d1]") == list(range(200))
    assert sorted(o for (tag, o) in positions if tag == "app") == list(range(5))  # untouched

    verified = run_cli(env, *readback)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert _json(verified)["status"] == "verified"
    again = run_cli(env, "repair", "--dedupe", "--table", TABLE, "--json")
    assert _json(again)["duplicate_rows"] == 0 and DeltaTable(served).version() == version + 1


def test_repair_dedupe_on_the_embedded_default(tmp_path: Path, embedded: dict[str, str]) -> None:
    _duplicate_then_repair(embedded, tmp_path, table_uri(str(tmp_path / "wh"), TABLE))


def test_repair_dedupe_through_the_sql_warehouse(tmp_path: Path, local_cloud: dict[str, object]) -> None:
    host = clean_env() | production_env(local_cloud, SECRET, tmp_path / "host")
    _duplicate_then_repair(host, tmp_path, table_uri(str(local_cloud["warehouse"]), TABLE))
    history = DeltaTable(table_uri(str(local_cloud["warehouse"]), TABLE)).history(limit=1)
    assert history[0]["operation"] == "WRITE"  # the warehouse's INSERT ... REPLACE WHERE, one commit


def test_repair_needs_a_named_repair_and_a_source_for_a_partition(embedded: dict[str, str]) -> None:
    unnamed = run_cli(embedded, "repair", "--table", TABLE)
    assert unnamed.returncode == 2 and "--dedupe" in unnamed.stderr
    orphan = run_cli(embedded, "repair", "--dedupe", "--table", TABLE, "--partition", "d1")
    assert orphan.returncode == 2 and "needs --source" in orphan.stderr
