"""Dagster metadata built from the runtime's values: standard ``dagster/*`` keys plus ``zerobus/*``.

The standard keys are written literally (``dg.TableMetadataSet`` is not exported in 1.13). Nothing here
ever sees a secret: the inputs are a ``WriteResult``, an Arrow schema and table names.

The ``zerobus/source``, ``zerobus/partition`` and ``zerobus/table`` keys are also how the read-back
sensor finds the coverage of a materialisation, so they are part of this integration's interface.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg
import pyarrow as pa

from zerobus_orchestration.reserved import is_reserved
from zerobus_orchestration.type_map import delta_type

# Keys shared by the IO manager (writer) and the read-back sensor (reader).
KEY_TABLE = "zerobus/table"
KEY_SOURCE = "zerobus/source"
KEY_PARTITION = "zerobus/partition"
# A replace write's ``_twg_source`` tag: inputs read only the run the latest materialisation names.
KEY_SOURCE_TAG = "zerobus/source_tag"
KEY_DELTA_VERSION = "zerobus/delta_version"
COLUMN_SCHEMA = "dagster/column_schema"


def descriptions_from_column_schema(value: object) -> dict[str, str]:
    """Column descriptions from a ``dagster/column_schema`` value (``TableSchema`` or its metadata value)."""
    schema = value.schema if isinstance(value, dg.TableSchemaMetadataValue) else value
    if not isinstance(schema, dg.TableSchema):
        return {}
    return {c.name: c.description for c in schema.columns if c.description and c.description.strip()}


def _column_type(t: pa.DataType) -> str:
    try:
        return delta_type(t)
    except Exception:  # an unsupported type is reported by the write itself, not by metadata
        return str(t)


def column_schema_from_arrow(
    schema: pa.Schema, descriptions: Mapping[str, str] | None = None, *, include_reserved: bool = False
) -> dg.TableSchema:
    """A ``TableSchema`` with Databricks SQL type text and the given column descriptions."""
    described = descriptions or {}
    columns = [
        dg.TableColumn(
            name=f.name,
            type=_column_type(f.type),
            description=described.get(f.name),
            constraints=dg.TableColumnConstraints(nullable=f.nullable),
        )
        for f in schema
        if include_reserved or not is_reserved(f.name)
    ]
    return dg.TableSchema(columns=columns)


def table_uri(*, warehouse: str, full_name: str, embedded: bool, workspace_url: str | None) -> str | None:
    """Where a user can look at the table: its folder in embedded mode, Catalog Explorer in production."""
    from zerobus_orchestration.tables import TableName
    from zerobus_orchestration.tables import table_uri as warehouse_uri

    name = TableName.parse(full_name)  # parsed once: parts, never a re-split of the dotted string
    if embedded:
        return warehouse_uri(warehouse, name)
    if workspace_url:
        return f"{workspace_url.rstrip('/')}/explore/data/{name.catalog}/{name.schema}/{name.table}"
    return None


def _optional_float(value: float | None) -> float | None:
    """Latency and coalescing are measured; with nothing acknowledged there is no value (not 0)."""
    return None if value is None else round(float(value), 6)


def _mb_per_s(bytes_written: int, duration_s: float) -> float:
    return round(bytes_written / 1e6 / duration_s, 3) if duration_s > 0 else 0.0


def write_metadata(
    result: Any,
    *,
    full_name: str,
    schema: pa.Schema,
    descriptions: Mapping[str, str] | None,
    uri: str | None,
    partitioned: bool,
) -> dict[str, Any]:
    """Output metadata of one durable write (``result`` is the runtime's ``WriteResult``)."""
    output_rows = int(result.rows_written) + int(result.rows_skipped)
    metadata: dict[str, Any] = {
        "dagster/row_count": output_rows,
        "dagster/table_name": full_name,
        COLUMN_SCHEMA: column_schema_from_arrow(schema, descriptions),
        "dagster/storage_kind": "delta",
        KEY_TABLE: full_name,
        KEY_SOURCE: result.source,
        KEY_PARTITION: result.partition,
        "zerobus/rows_written": int(result.rows_written),
        "zerobus/rows_skipped": int(result.rows_skipped),
        # Replayed by the SDK's reconnects during the write: may be in the table twice (an upper bound).
        "zerobus/rows_possibly_resent": int(result.rows_possibly_resent),
        # Two byte counts, labelled: the user's own Arrow bytes, and those bytes as sent (stamped: conformed
        # to the table's wire types, plus the three reserved ``_twg_*`` columns).
        "zerobus/payload_bytes": int(result.payload_bytes),
        "zerobus/bytes_written": int(result.bytes_written),
        "zerobus/offset_start": int(result.offset_start),
        "zerobus/offset_end": int(result.offset_end),
        "zerobus/streams_used": int(result.streams_used),
        "zerobus/coalesce_ratio_p50": _optional_float(result.coalesce_ratio_p50),
        "zerobus/delivery_latency_p50_s": _optional_float(result.delivery_latency_p50_s),
        "zerobus/delivery_latency_p99_s": _optional_float(result.delivery_latency_p99_s),
        "zerobus/duration_s": round(float(result.duration_s), 4),
        "zerobus/payload_mb_per_s": _mb_per_s(int(result.payload_bytes), float(result.duration_s)),
        "zerobus/mb_per_s": _mb_per_s(int(result.bytes_written), float(result.duration_s)),
    }
    if partitioned:
        metadata["dagster/partition_row_count"] = output_rows
    if uri:
        metadata["dagster/uri"] = uri
    if result.delta_version is not None:
        metadata[KEY_DELTA_VERSION] = int(result.delta_version)
    if (
        getattr(result, "run_order_version", None) is not None
    ):  # a replace: its place in the partition's order
        metadata["zerobus/run_order_version"] = int(result.run_order_version)
    return metadata


def metadata_value(metadata: Mapping[str, Any], key: str) -> Any:
    """The raw value of ``key`` in recorded metadata (recorded values are ``MetadataValue`` wrappers)."""
    value = metadata.get(key)
    return value.value if isinstance(value, dg.MetadataValue) else value


def report_metadata(report: Any) -> dict[str, Any]:
    """Flat ``readback/*`` metadata of a ``ReadbackReport`` (JSON-able values only)."""
    if hasattr(report, "as_dict"):
        data = report.as_dict()
    elif isinstance(report, Mapping):  # ``ReadbackOutcome.report``: the report already as a dict
        data = dict(report)
    else:
        data = dict(vars(report))
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, bool | int | float | str) or value is None:
            out[f"readback/{key}"] = value
        else:
            out[f"readback/{key}"] = dg.MetadataValue.json(_jsonable(value))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)
