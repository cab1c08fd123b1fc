"""``zerobus-orch ingest`` of bad input, through the real CLI on the embedded default (official SDK, the
warehouse's emulator daemon), checked in the Delta table itself (issue 24):

- one out-of-range DATE in row 150,000 of a 200,000-row Parquet file: exit 2, the error names the file,
  the row and the column, and there is no table (the old command left 131,072 rows and said nothing);
- CSV: an empty or ``NULL`` field lands as NULL, in string columns too (it landed as ``''``), and
  ``--csv-null`` changes what is NULL; a value that does not convert names the table, the column (not
  "CSV column #1"), the file, the row and the fix, and nothing is sent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from tests.support.bad_input import BAD_ROW, ROWS, events_parquet
from tests.support.local_cloud import clean_env, run_cli
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration  # the official SDK against the emulator

TABLE = "main.raw.cli_events"


def _ingest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env() | {
        "ZEROBUS_WAREHOUSE": str(tmp_path / "wh"),
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.2",
    }
    return run_cli(env, "ingest", "--table", TABLE, "--source", "s", "--json", *args, timeout=300)


def _table(tmp_path: Path) -> Path:
    return Path(table_uri(str(tmp_path / "wh"), TABLE))


def test_a_bad_date_in_row_150000_fails_with_nothing_sent_and_no_table(tmp_path: Path) -> None:
    path = events_parquet(tmp_path / "events.parquet")
    done = _ingest(tmp_path, str(path))
    assert done.returncode == 2, done.stderr[-3000:]
    error = done.stderr
    assert f"table {TABLE}, column 'day'" in error and "outside 0001-01-01 .. 9999-12-31" in error
    assert f"Where: {path}, row {BAD_ROW:,} (rows counted from 1)" in error
    assert "Nothing of this write was sent, and the table was neither created nor changed" in error
    assert not _table(tmp_path).exists()  # 0 rows, and no empty table either

    events_parquet(path, bad_row=None)  # corrected: the same command writes every row, once
    fixed = _ingest(tmp_path, str(path))
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert json.loads(fixed.stdout)["rows_written"] == ROWS
    assert DeltaTable(str(_table(tmp_path))).to_pyarrow_table().num_rows == ROWS


def test_csv_nulls_land_as_null_and_the_spelling_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text('id,name,city\n1,,Oslo\n2,"",Rome\n3,NULL,-\n4,Ada,\n')
    done = _ingest(tmp_path, str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = DeltaTable(str(_table(tmp_path))).to_pyarrow_table().sort_by("id").select(["name", "city"])
    assert rows.to_pylist() == [
        {"name": None, "city": "Oslo"},
        {"name": "", "city": "Rome"},  # quoted: an empty string
        {"name": None, "city": "-"},
        {"name": "Ada", "city": None},
    ]
    # --mode append: the partition as given (auto would write a run of it, s[p2@cli-...])
    again = _ingest(tmp_path, "--csv-null", "-", "--partition", "p2", "--mode", "append", str(path))
    assert again.returncode == 0, again.stderr[-3000:]
    table = DeltaTable(str(_table(tmp_path))).to_pyarrow_table()
    second = table.filter(pc.equal(table["_twg_source"], "s[p2]")).sort_by("id").select(["name", "city"])
    assert second.to_pylist() == [
        {"name": "", "city": "Oslo"},
        {"name": "", "city": "Rome"},
        {"name": "NULL", "city": None},
        {"name": "Ada", "city": ""},
    ]


def test_a_csv_value_that_does_not_convert_names_table_column_file_row_and_fix(tmp_path: Path) -> None:
    lines = ["id,qty"] + [f"{i},{i}" for i in range(ROWS)]
    lines[BAD_ROW] = f"{BAD_ROW - 1},twelve"
    path = tmp_path / "orders.csv"
    path.write_text("\n".join(lines) + "\n")
    done = _ingest(tmp_path, str(path))
    assert done.returncode == 2, done.stderr[-3000:]
    error = done.stderr
    assert "CSV column #" not in error
    assert f"table {TABLE}: {path}, column 'qty', row {BAD_ROW:,}" in error
    assert "the value 'twelve' is not a BIGINT" in error and "--schema qty=STRING" in error
    assert not _table(tmp_path).exists()
