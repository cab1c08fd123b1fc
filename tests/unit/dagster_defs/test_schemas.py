"""Nested Databricks SQL types in a ``dg.TableSchema``: parsed back to the Arrow type they spell."""

import dagster as dg
import pyarrow as pa
import pytest
from hypothesis import given, settings

from dagster_defs import column_schema_from_arrow
from dagster_defs.schemas import arrow_schema_from_column_schema, arrow_type_of_sql
from tests.support.catalog_strategies import SCHEMAS
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.type_map import delta_type


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ARRAY<STRING>", pa.list_(pa.string())),
        ("array<decimal(18, 2)>", pa.list_(pa.decimal128(18, 2))),
        ("MAP<STRING, ARRAY<INT>>", pa.map_(pa.string(), pa.list_(pa.int32()))),
        (
            "STRUCT<city: STRING NOT NULL, `zip code`: STRING, n INT>",
            pa.struct([pa.field("city", pa.string(), False), ("zip code", pa.string()), ("n", pa.int32())]),
        ),
        ("STRUCT<`a``b`: BIGINT>", pa.struct([("a`b", pa.int64())])),
        (
            "ARRAY<STRUCT<day: DATE, pages: INT>>",
            pa.list_(pa.struct([("day", pa.date32()), ("pages", pa.int32())])),
        ),
    ],
)
def test_nested_types_parse(text: str, expected: pa.DataType) -> None:
    assert arrow_type_of_sql(text, column="c", table="main.raw.t") == expected


@pytest.mark.parametrize(
    "text", ["ARRAY<STRING", "STRUCT<a>", "MAP<INT>", "ARRAY<STRING, INT>", "STRUCT<`a: INT>"]
)
def test_a_malformed_nested_type_names_table_and_column(text: str) -> None:
    with pytest.raises(ConfigError, match=r"table main\.raw\.t: column 'c.*'.*ARRAY<T>"):
        arrow_type_of_sql(text, column="c", table="main.raw.t")


@settings(max_examples=150, deadline=None)
@given(SCHEMAS)
def test_a_column_schema_from_arrow_spells_the_same_types(schema: pa.Schema) -> None:
    # Nested nullability is not part of the SQL text, so compare what Delta would store.
    back = arrow_schema_from_column_schema(column_schema_from_arrow(schema, include_reserved=True), table="t")
    assert [delta_type(f.type) for f in back] == [delta_type(f.type) for f in schema]
    assert [(f.name, f.nullable) for f in back] == [(f.name, f.nullable) for f in schema]


def test_a_table_schema_with_nested_columns_becomes_an_arrow_schema() -> None:
    columns = dg.TableSchema(columns=[dg.TableColumn("tags", "ARRAY<STRING>")])
    assert arrow_schema_from_column_schema(columns, table="t") == pa.schema([("tags", pa.list_(pa.string()))])
