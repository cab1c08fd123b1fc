"""One parser for column types written as text: the union of what the Dagster contract assets (SQL /
Delta / ODCS names) and the Airflow operators (Arrow aliases) accepted, with the same Arrow types."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.schema_text import arrow_schema_of_text, arrow_type_of_text

# What the Dagster contract assets accepted (SQL, Delta and ODCS names, any case).
SQL_SPELLINGS: list[tuple[str, pa.DataType]] = [
    ("tinyint", pa.int8()),
    ("byte", pa.int8()),
    ("smallint", pa.int16()),
    ("short", pa.int16()),
    ("int", pa.int32()),
    ("INTEGER", pa.int32()),
    ("BIGINT", pa.int64()),
    ("long", pa.int64()),
    ("float", pa.float32()),
    ("real", pa.float32()),
    ("DOUBLE", pa.float64()),
    ("number", pa.float64()),
    ("boolean", pa.bool_()),
    ("bool", pa.bool_()),
    ("STRING", pa.string()),
    ("varchar", pa.string()),
    ("text", pa.string()),
    ("binary", pa.binary()),
    ("date", pa.date32()),
    ("TIMESTAMP", pa.timestamp("us", tz="UTC")),
    ("timestamp_ltz", pa.timestamp("us", tz="UTC")),
    ("timestamp_ntz", pa.timestamp("us")),
    ("DECIMAL(10,2)", pa.decimal128(10, 2)),
    ("numeric ( 38 , 0 )", pa.decimal128(38, 0)),
    ("VARCHAR(20)", pa.string()),
    ("char(3)", pa.string()),
    ("  bigint  ", pa.int64()),
]
# What the Airflow operators accepted (Arrow aliases, timestamp with a zone, decimal/decimal128).
ARROW_SPELLINGS: list[tuple[str, pa.DataType]] = [
    ("int64", pa.int64()),
    ("Int32", pa.int32()),
    ("uint8", pa.uint8()),
    ("i8", pa.int64()),
    ("float16", pa.float16()),
    ("f8", pa.float64()),
    ("utf8", pa.string()),
    ("large_string", pa.large_string()),
    ("large_binary", pa.large_binary()),
    ("date32", pa.date32()),
    ("date64", pa.date64()),
    ("time64[us]", pa.time64("us")),
    ("timestamp[ms]", pa.timestamp("ms")),
    ("timestamp[us, tz=UTC]", pa.timestamp("us", tz="UTC")),
    ("timestamp[ns,tz=Europe/Paris]", pa.timestamp("ns", tz="Europe/Paris")),
    ("duration[s]", pa.duration("s")),
    ("decimal(10, 2)", pa.decimal128(10, 2)),
    ("decimal128(5,1)", pa.decimal128(5, 1)),
    ("null", pa.null()),
]


@pytest.mark.parametrize(("text", "expected"), SQL_SPELLINGS + ARROW_SPELLINGS)
def test_every_spelling_either_front_end_accepted(text: str, expected: pa.DataType) -> None:
    assert arrow_type_of_text(text, column="c", table="main.raw.t") == expected


def test_overlapping_names_mean_the_same_type_in_both_vocabularies() -> None:
    for name in ("float", "double", "bool", "boolean", "string", "binary"):
        assert arrow_type_of_text(name, column="c") == pa.type_for_alias(name)


@pytest.mark.parametrize("text", ["int65", "STRUCT<a: INT>", "array<string>", "timestamp[us, tz=]", ""])
def test_unknown_or_nested_types_are_refused_with_table_column_and_fix(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        arrow_type_of_text(text, column="payload", table="main.raw.t")
    message = str(caught.value)
    assert message.startswith("table main.raw.t: column 'payload': unknown Arrow type")
    assert "BIGINT" in message and "int64" in message and "schema=pa.schema" in message


def test_without_a_table_the_message_starts_at_the_column() -> None:
    with pytest.raises(ConfigError, match=r"^column 'x': unknown Arrow type 'int65'"):
        arrow_type_of_text("int65", column="x")


def test_mapping_with_not_null_and_mixed_vocabularies() -> None:
    schema = arrow_schema_of_text(
        {
            "id": "BIGINT NOT NULL",
            "ts": "timestamp[us, tz=UTC]",
            "price": "DECIMAL(10,2)",
            "raw": pa.binary(),
        },
        table="main.raw.t",
    )
    assert schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("raw", pa.binary()),
        ]
    )
    given = pa.schema([("a", pa.int8())])
    assert arrow_schema_of_text(given) is given


@pytest.mark.parametrize("spec", [{}, [("a", "int64")], "a int64"])
def test_a_mapping_is_required(spec: object) -> None:
    with pytest.raises(ConfigError, match="non-empty"):
        arrow_schema_of_text(spec)  # type: ignore[arg-type]


def test_importing_the_parser_does_not_import_pyarrow() -> None:
    """Airflow DAG files import the operators that use it: they must stay cheap to parse."""
    code = (
        "import sys, json\nimport zerobus_orchestration.schema_text\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "pyarrow" not in json.loads(out.strip().splitlines()[-1])
