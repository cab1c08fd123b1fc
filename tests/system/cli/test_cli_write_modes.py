"""``zerobus-orch ingest --mode replace`` through the real CLI (a subprocess), on the embedded default and
on the local cloud (production configuration: remote endpoint, OAuth M2M, ``unity`` catalog whose SQL
warehouse runs the DELETE of the superseded run on the table's real Delta data). The refusals of bad
options run the console script's entry point in this process (``tests.support.console_script``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.console_script import run_console_script
from tests.support.iceberg_helpers import wait_until
from tests.support.local_cloud import clean_env, production_env, run_cli, serve
from zerobus_orchestration.tables import table_uri

TABLE = "main.derived.daily"
SECRET = "write-modes-test-secret"


def _input(path: Path, ids: range) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]}), path)
    return str(path)


def _ingest(env: dict[str, str], data: str, *options: str) -> dict[str, object]:
    done = run_cli(env, "ingest", "--table", TABLE, "--source", "daily", "--json", *options, data)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _replace(env: dict[str, str], data: str, partition: str) -> dict[str, object]:
    return _ingest(env, data, "--mode", "replace", "--role", "derived", "--partition", partition)


def _rows(uri: str, storage_options: dict[str, str] | None = None) -> dict[str, list[int]]:
    table = DeltaTable(uri, storage_options=storage_options).to_pyarrow_table()
    rows: dict[str, list[int]] = {}
    for tag, row_id in zip(table["_twg_source"].to_pylist(), table["id"].to_pylist(), strict=True):
        rows.setdefault(tag, []).append(row_id)
    return {tag: sorted(ids) for tag, ids in rows.items()}


@pytest.fixture
def embedded(tmp_path: Path) -> dict[str, str]:
    """The embedded default (the warehouse's shared emulator daemon) on a fresh warehouse."""
    return clean_env() | {
        "ZEROBUS_WAREHOUSE": str(tmp_path / "wh"),
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.2",
        "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2",
        "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
    }


def test_a_second_run_of_a_partition_replaces_the_first_on_the_embedded_default(
    tmp_path: Path, embedded: dict[str, str]
) -> None:
    first = _replace(embedded, _input(tmp_path / "run1.parquet", range(100)), "2024-01-01")
    assert first["superseded_sources"] == [] and str(first["partition"]).startswith("2024-01-01@cli-")
    other = _replace(embedded, _input(tmp_path / "other.parquet", range(500, 510)), "2024-01-02")

    # The second run names itself, so that running the same command again resumes it.
    data = _input(tmp_path / "run2.parquet", range(1000, 1030))
    options = ["--mode", "replace", "--role", "derived", "--replace-key", "2024-01-01"]
    options += ["--partition", "2024-01-01@r2"]
    done = run_cli(embedded, "ingest", "--table", TABLE, "--source", "daily", *options, data)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"replaced partition '2024-01-01' (this run: '2024-01-01@r2'): deleted the rows of 1 earlier "
        f"run(s): daily[{first['partition']}]" in done.stdout
    )
    again = _ingest(embedded, data, *options)
    assert (again["rows_written"], again["rows_skipped"], again["superseded_sources"]) == (0, 30, [])

    assert _rows(table_uri(str(tmp_path / "wh"), TABLE)) == {
        "daily[2024-01-01@r2]": list(range(1000, 1030)),
        f"daily[{other['partition']}]": list(range(500, 510)),  # another partition is left alone
    }


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (  # the runtime's refusal, before anything is sent, plus the command line's way to say "derived"
            ["--source", "daily", "--mode", "replace"],
            ["main.derived.daily is a primary_raw table", "on the command line: --role derived"],
        ),
        (
            ["--source", "daily", "--mode", "append", "--replace-key", "d1"],
            ["--replace-key applies only to --mode auto or replace"],
        ),
    ],
)
def test_bad_write_mode_options_are_refused_before_anything_is_written(
    tmp_path: Path, embedded: dict[str, str], options: list[str], expected: list[str]
) -> None:
    data = _input(tmp_path / "run1.parquet", range(10))
    done = run_console_script("ingest", "--table", TABLE, "--json", *options, data, env=embedded)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert all(fragment in done.stderr for fragment in expected), done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "wh").exists()  # no table, no emulator started


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[dict[str, object]]:
    env = clean_env() | {"ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET}
    with serve(str(tmp_path / "cloud"), env) as info:
        yield info


def test_replace_on_the_unity_backend_deletes_the_first_run_through_the_sql_warehouse(
    tmp_path: Path, local_cloud: dict[str, object]
) -> None:
    """Two hosts with nothing local in common: B's replace finds A's run in the table and deletes it with
    ``DELETE FROM ... WHERE _twg_source IN (...)`` on the local cloud's SQL warehouse."""
    host_a = clean_env() | production_env(local_cloud, SECRET, tmp_path / "host_a")
    first = _replace(host_a, _input(tmp_path / "run1.parquet", range(300)), "2024-01-01")
    host_b = clean_env() | production_env(local_cloud, SECRET, tmp_path / "host_b")
    second = _replace(host_b, _input(tmp_path / "run2.parquet", range(1000, 1120)), "2024-01-01")
    assert second["superseded_sources"] == [f"daily[{first['partition']}]"]

    served = table_uri(str(local_cloud["warehouse"]), TABLE)
    assert _rows(served) == {f"daily[{second['partition']}]": list(range(1000, 1120))}
    history = DeltaTable(served).history()
    assert [h["operation"] for h in history].count("DELETE") == 1  # the warehouse's DELETE, one commit
    assert list((tmp_path / "host_b" / "warehouse").iterdir()) == []  # nothing written locally


def test_a_rerun_from_another_host_is_compared_with_the_table_itself(
    tmp_path: Path, local_cloud: dict[str, object]
) -> None:
    """Two hosts share nothing but the local cloud: host B's re-run of partition 2024-01-01 (primary raw,
    the default role, ``--mode auto``) is compared with host A's rows as the table holds them."""
    host_a = clean_env() | production_env(local_cloud, SECRET, tmp_path / "host_a")
    host_b = clean_env() | production_env(local_cloud, SECRET, tmp_path / "host_b")
    day = _input(tmp_path / "day.parquet", range(400))

    def ingest(env: dict[str, str], data: str, *options: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            env, "ingest", "--table", TABLE, "--source", "daily", "--partition", "2024-01-01", *options, data
        )

    first = ingest(host_a, day, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    written = json.loads(first.stdout)
    served = table_uri(str(local_cloud["warehouse"]), TABLE)
    # The ingest returns once its rows are durable; the service commits them to Delta a moment later.
    first_run = f"daily[{written['partition']}]"
    wait_until(lambda: _rows(served).get(first_run) == list(range(400)), 60, "host A's rows in the table")
    version = DeltaTable(served).version()

    same = ingest(host_b, day)
    assert same.returncode == 0, same.stderr[-3000:]
    assert (
        f"already delivered: nothing sent, the table holds this input as run daily[{written['partition']}]"
        in (same.stdout)
    )
    assert DeltaTable(served).version() == version, "nothing committed"

    corrected = _input(tmp_path / "corrected.parquet", range(1, 401))
    refused = ingest(host_b, corrected, "--json")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    for part in ("primary raw", "nothing was sent", "--allow-raw-replace", "--role derived"):
        assert part in refused.stderr, refused.stderr
    assert DeltaTable(served).version() == version

    replaced = ingest(host_b, corrected, "--json", "--mode", "replace", "--allow-raw-replace")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    result = json.loads(replaced.stdout)
    assert result["superseded_sources"] == [f"daily[{written['partition']}]"]
    assert _rows(served) == {f"daily[{result['partition']}]": list(range(1, 401))}
