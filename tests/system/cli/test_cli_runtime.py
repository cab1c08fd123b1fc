"""`zerobus-orch ingest` and `readback` against the embedded default: the worker's shared warehouse and its
daemon (tests/system/cli/conftest.py), a table of each test's own."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from zerobus_orchestration.cli.main import app
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID


@pytest.fixture
def env(shared_warehouse: Path) -> Path:
    return shared_warehouse


def _json(output: str) -> dict[str, object]:
    return json.loads(output.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_ingest_files_then_readback_verifies(env: Path, tmp_path: Path, unique_table: str) -> None:
    data = pa.table({"id": pa.array(range(3_000), pa.int64()), "label": [str(i) for i in range(3_000)]})
    pq.write_table(data.slice(0, 2_000), tmp_path / "part-0.parquet")
    pq.write_table(data.slice(2_000), tmp_path / "part-1.parquet")
    runner = CliRunner()
    ingest = [
        "ingest",
        "--table",
        unique_table,
        "--warehouse",
        str(env),
        "--json",
        str(tmp_path / "part-*.parquet"),
    ]
    ingested = runner.invoke(app, ingest)
    assert ingested.exit_code == 0, ingested.output
    summary = _json(ingested.stdout)
    assert summary["rows_written"] == 3_000 and len(summary["files"]) == 2
    assert summary["source"] == "part-*.parquet"

    again = runner.invoke(app, ingest)
    repeated = _json(again.stdout)  # same command, same source: coverage holds every row already
    assert (repeated["rows_written"], repeated["rows_skipped"]) == (0, 3_000)

    checked = runner.invoke(
        app, ["readback", "--table", unique_table, "--warehouse", str(env), "--wait", "30", "--json"]
    )
    assert checked.exit_code == 0, checked.output
    report = _json(checked.stdout)
    assert report["verified"] is True and report["rows_scanned"] == 3_000


def test_several_files_under_one_source_are_one_write(env: Path, tmp_path: Path, unique_table: str) -> None:
    """Positions count across files: a second file is never mistaken for the first one re-sent."""
    for i in range(2):
        pq.write_table(
            pa.table({"id": pa.array(range(i * 1_000, (i + 1) * 1_000), pa.int64())}),
            tmp_path / f"f{i}.parquet",
        )
    result = CliRunner().invoke(
        app,
        [
            "ingest",
            "--table",
            unique_table,
            "--warehouse",
            str(env),
            "--json",
            "--source",
            "s1",
            "--partition",
            "p1",
            str(tmp_path / "f0.parquet"),
            str(tmp_path / "f1.parquet"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = _json(result.stdout)
    assert (summary["rows_written"], summary["rows_skipped"], summary["offset_end"]) == (2_000, 0, 2_000)


def test_ingest_csv(env: Path, tmp_path: Path, unique_table: str) -> None:
    pacsv.write_csv(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}), tmp_path / "people.csv")
    result = CliRunner().invoke(
        app,
        [
            "ingest",
            "--table",
            unique_table,
            "--warehouse",
            str(env),
            "--json",
            str(tmp_path / "people.csv"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert _json(result.stdout)["rows_written"] == 3


def test_readback_exits_non_zero_when_covered_rows_are_missing(
    env: Path, tmp_path: Path, unique_table: str
) -> None:
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), tmp_path / "ten.parquet")
    runner = CliRunner()
    assert (
        runner.invoke(
            app, ["ingest", "--table", unique_table, "--warehouse", str(env), str(tmp_path / "ten.parquet")]
        ).exit_code
        == 0
    )
    # Coverage claiming rows the table never received: read-back must say so and fail.
    with CoverageStore(env / "_zerobus" / "coverage.sqlite", unique_table) as store:
        store.record(CoverageKey(DEFAULT_SINK_ID, "ten.parquet", ""), OffsetRange(10, 15))
    # --wait bounds how long read-back looks again for rows that may still be arriving.
    failed = runner.invoke(
        app, ["readback", "--table", unique_table, "--warehouse", str(env), "--wait", "3", "--json"]
    )
    assert failed.exit_code == 1, failed.output
    report = _json(failed.stdout)
    assert report["verified"] is False
    assert report["missing_ranges"], report
