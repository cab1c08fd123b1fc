"""CSV through ``read_files``: what is NULL (pyarrow's list, unquoted fields only, configurable) and a
conversion error that names the column, the row, the value and the fix (pyarrow names "column #1")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.csv_input import DEFAULT_NULL_VALUES
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.files import read_files


def _rows(path: Path, **kwargs: object) -> list[dict[str, object]]:
    return pa.Table.from_batches(list(read_files(str(path), **kwargs).batches())).to_pylist()  # type: ignore[arg-type]


def test_unquoted_null_spellings_are_null_in_string_columns_too(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text('id,name,score\n1,,\n2,"",7\n3,NULL,NA\n4,"NA",null\n5,N/A,8\n')
    assert _rows(path) == [
        {"id": 1, "name": None, "score": None},
        {"id": 2, "name": "", "score": 7},  # quoted: the text itself, an empty string
        {"id": 3, "name": None, "score": None},
        {"id": 4, "name": "NA", "score": None},
        {"id": 5, "name": None, "score": 8},
    ]
    assert {"", "NULL", "null", "NA", "N/A", "NaN"} <= set(DEFAULT_NULL_VALUES)


def test_the_null_spellings_are_configurable(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text("id,name\n1,\n2,-\n3,NULL\n")
    assert [r["name"] for r in _rows(path, csv_null_values=["-"])] == ["", None, "NULL"]
    assert [r["name"] for r in _rows(path, csv_null_values=())] == ["", "-", "NULL"]


def test_the_empty_schema_reads_with_the_same_null_rules(tmp_path: Path) -> None:
    path = tmp_path / "empty_names.csv"
    path.write_text("id,name\n1,\n2,\n")
    files = read_files(str(path), schema={"name": "STRING"})
    assert files.empty_schema() == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert [r["name"] for r in _rows(path, schema={"name": "STRING"})] == [None, None]


def _bad_late_value(tmp_path: Path, rows: int = 200_000, bad_row: int = 150_000) -> Path:
    lines = ["id,qty"] + [f"{i},{i}" for i in range(rows)]
    lines[bad_row] = f"{bad_row - 1},twelve"  # data row ``bad_row`` (counted from 1)
    path = tmp_path / "orders.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_conversion_error_names_the_column_the_row_the_value_and_the_fix(tmp_path: Path) -> None:
    path = _bad_late_value(tmp_path)
    with pytest.raises(ConfigError) as failure:
        _rows(path)
    message = str(failure.value)
    assert "#1" not in message
    assert f"{path}, column 'qty', row 150,000 (data rows counted from 1 after the header)" in message
    assert "the value 'twelve' is not a BIGINT, the type inferred from the file's first rows" in message
    assert "--schema qty=STRING" in message and "schema={'qty': 'STRING'}" in message


def test_a_declared_type_conversion_error_says_so(tmp_path: Path) -> None:
    path = _bad_late_value(tmp_path, rows=50, bad_row=7)
    with pytest.raises(ConfigError, match=r"row 7 .*'twelve' is not a DOUBLE, the declared type\. Fix"):
        _rows(path, schema={"qty": "DOUBLE"})


def test_a_column_empty_in_the_first_block_names_why_no_type_was_inferred(tmp_path: Path) -> None:
    path = tmp_path / "late.csv"
    lines = ["id,note"] + [f"{i}," for i in range(300_000)] + ["300000,hello"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ConfigError, match=r"column 'note', row 300,001 .*'hello' comes after the file's first"
    ):
        _rows(path)
    assert _rows(path, schema={"note": "STRING"})[-1] == {"id": 300_000, "note": "hello"}
