"""The local backend's schema changes on a Delta table, through delta-rs (``catalog.local``).

Create, add columns, widen by rewriting, and the delta-rs traps each works around: a losing commit
must fail rather than be rebased onto the next version, and naive timestamps need the
``timestampNtz`` feature asked for explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from zerobus_orchestration.catalog.steps import ColumnDef
from zerobus_orchestration.type_map import delta_json_type

TIMESTAMP_NTZ_FEATURE = "delta.feature.timestampNtz"


def no_rebase() -> Any:
    """Commit exactly on the version read, or fail: delta-rs otherwise retries a losing commit on
    the next version, and a losing CREATE then lands as version 1 and replaces the winner's schema
    (two processes creating one table each lost the other's column)."""
    from deltalake import CommitProperties

    return CommitProperties(max_commit_retries=0)


def rewrite_widened(dt: Any, widened: Mapping[str, pa.DataType]) -> None:
    """Every row, cast to the widened schema, written back as one new version of the same table."""
    from deltalake import write_deltalake

    dataset = dt.to_pyarrow_dataset()
    target = pa.schema(
        [
            pa.field(f.name, widened[f.name], f.nullable, f.metadata) if f.name in widened else f
            for f in dataset.schema
        ]
    )
    # Streamed batch by batch; the old files stay in place (only the log drops them), so the read is
    # unaffected by the write, and a reader sees either the old version or the new one.
    batches = (batch.cast(target) for batch in dataset.to_batches())
    write_deltalake(
        dt,
        pa.RecordBatchReader.from_batches(target, batches),
        mode="overwrite",
        schema_mode="overwrite",
        commit_properties=no_rebase(),
    )


def comment_metadata(column: ColumnDef) -> dict[str, str]:
    return {"comment": column.comment} if column.comment is not None else {}


def add_columns(dt: Any, columns: list[ColumnDef]) -> None:
    from deltalake import Field, TableFeatures

    features = set(dt.protocol().reader_features or ()) | set(dt.protocol().writer_features or ())
    if "timestampNtz" not in features and any(contains_naive_timestamp(c.arrow_type) for c in columns):
        dt.alter.add_feature(TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True)
    fields = [
        Field.from_json(
            json.dumps(
                {
                    "name": c.name,
                    "type": delta_json_type(c.arrow_type),
                    "nullable": c.nullable,
                    "metadata": comment_metadata(c),
                }
            )
        )
        for c in columns
    ]
    dt.alter.add_columns(fields)


def naive_timestamp_in_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return contains_naive_timestamp(t)
    if pa.types.is_list(t):
        return naive_timestamp_in_map(t.value_type)
    if pa.types.is_struct(t):
        return any(naive_timestamp_in_map(t.field(i).type) for i in range(t.num_fields))
    return False


def contains_naive_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_list(t):
        return contains_naive_timestamp(t.value_type)
    if pa.types.is_map(t):
        return contains_naive_timestamp(t.key_type) or contains_naive_timestamp(t.item_type)
    if pa.types.is_struct(t):
        return any(contains_naive_timestamp(t.field(i).type) for i in range(t.num_fields))
    return False
