"""``zerobus-orch ingest`` of an input without a row, through the real CLI on the embedded default: the
table is still created, from the file's own schema (or the declared one), so a reader downstream finds
an empty table instead of none."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from tests.support.local_cloud import clean_env, run_cli
from zerobus_orchestration.tables import table_uri

TABLE = "main.derived.empty_first"


def _ingest(tmp_path: Path, *args: str) -> dict[str, object]:
    env = clean_env() | {
        "ZEROBUS_WAREHOUSE": str(tmp_path / "wh"),
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.2",
    }
    done = run_cli(env, "ingest", "--table", TABLE, "--source", "s", "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _columns(tmp_path: Path) -> dict[str, tuple[str, bool]]:
    table = DeltaTable(table_uri(str(tmp_path / "wh"), TABLE))
    assert table.to_pyarrow_table().num_rows == 0
    schema = table.schema().to_arrow()
    return {f.name: (str(pa.field(f).type), f.nullable) for f in schema if not f.name.startswith("_twg_")}


def test_an_empty_parquet_file_creates_the_table_with_its_schema(tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.decimal128(18, 2))])
    pq.write_table(schema.empty_table(), empty)
    result = _ingest(tmp_path, str(empty))
    assert (result["rows_written"], result["rows_skipped"]) == (0, 0)
    assert _columns(tmp_path) == {"id": ("int64", False), "amount": ("decimal128(18, 2)", True)}


def test_a_header_only_csv_creates_the_table_with_the_declared_types(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("id,label,at\n")
    result = _ingest(
        tmp_path,
        "--schema",
        "id=BIGINT NOT NULL",
        "--schema",
        "label=STRING",
        "--schema",
        "at=TIMESTAMP",
        str(empty),
    )
    assert result["rows_written"] == 0
    assert _columns(tmp_path) == {
        "id": ("int64", False),
        "label": ("string", True),
        "at": ("timestamp[us, tz=UTC]", True),
    }
