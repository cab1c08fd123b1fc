"""``DesiredTable.build`` names the columns to keep statistics of when the reserved ones fall past 32."""

from __future__ import annotations

import pyarrow as pa

from zerobus_orchestration.catalog.base import NUM_INDEXED_COLUMNS, STATS_COLUMNS, DesiredTable
from zerobus_orchestration.catalog.plan import CreateTable, plan
from zerobus_orchestration.config import Role
from zerobus_orchestration.reserved import RESERVED_NAMES

RESERVED = ",".join(RESERVED_NAMES)


def _schema(n: int, **extra: pa.DataType) -> pa.Schema:
    return pa.schema([*(pa.field(f"c{i}", pa.int64()) for i in range(n)), *extra.items()])


def _stats(schema: pa.Schema, **kwargs: object) -> str | None:
    desired = DesiredTable.build("main.raw.t", schema, Role.PRIMARY_RAW, **kwargs)  # type: ignore[arg-type]
    return desired.creation_properties().get(STATS_COLUMNS)


def test_up_to_29_payload_columns_the_default_covers_the_reserved_ones() -> None:
    assert _stats(_schema(29)) is None


def test_a_30th_payload_column_names_the_first_29_and_the_reserved_ones() -> None:
    assert _stats(_schema(30)) == ",".join(f"c{i}" for i in range(29)) + "," + RESERVED


def test_struct_fields_count_one_each() -> None:
    wide = pa.struct([pa.field(f"f{i}", pa.int32()) for i in range(5)])
    # 26 plain columns + a 5-field struct = 31 leaves: the struct no longer fits, the plain ones do.
    assert _stats(_schema(26, s=wide)) == ",".join(f"c{i}" for i in range(26)) + "," + RESERVED


def test_a_name_that_is_not_a_plain_identifier_is_quoted() -> None:
    schema = pa.schema([pa.field("odd name", pa.int64()), *_schema(30)])
    assert _stats(schema).startswith("`odd name`,c0,")  # type: ignore[union-attr]


def test_the_user_s_own_statistics_settings_win() -> None:
    assert _stats(_schema(40), properties={NUM_INDEXED_COLUMNS: "64"}) is None
    assert _stats(_schema(40), properties={STATS_COLUMNS: "c0"}) == "c0"
    assert _stats(_schema(40), create_properties={STATS_COLUMNS: "c1"}) == "c1"


def test_the_create_step_declares_it() -> None:
    desired = DesiredTable.build("main.raw.t", _schema(35), Role.PRIMARY_RAW)
    (step,) = plan(None, desired).steps
    assert isinstance(step, CreateTable)
    assert step.properties[STATS_COLUMNS].endswith(RESERVED)
