"""Unity Catalog's answers read into ``TableState`` parts, for the ``unity`` backend.

Columns come from the REST ``TableInfo`` (``type_json`` is authoritative for the type); the protocol and
table features from ``DESCRIBE DETAIL`` (REST ``properties`` only echo them, so those keys are dropped).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from databricks.sdk.service.catalog import ColumnInfo

from zerobus_orchestration.catalog.base import LiveColumn, ProtocolInfo
from zerobus_orchestration.errors import CatalogError, UnsupportedType
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.type_map import arrow_type_of_delta, delta_type

# Protocol keys some workspaces echo in REST ``properties``; the protocol lives in ``TableState.protocol``.
_PROTOCOL_KEYS = ("delta.minReaderVersion", "delta.minWriterVersion")
_PROTOCOL_PREFIX = "delta.feature."
# Reader-writer table features: listed as reader features once the reader version is 3.
_READER_WRITER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)


def live_column(table: TableName, column: ColumnInfo) -> LiveColumn:
    if not column.type_json:
        raise CatalogError(f"table {table}: column {column.name!r} has no type_json in Unity Catalog")
    field = json.loads(column.type_json)
    try:
        arrow = arrow_type_of_delta(field["type"])
    except UnsupportedType as exc:
        raise UnsupportedType(f"table {table}, column {column.name!r}: {exc}") from exc
    return LiveColumn(
        name=column.name or field["name"],
        delta_type=delta_type(arrow),
        arrow_type=arrow,
        nullable=column.nullable if column.nullable is not None else bool(field.get("nullable", True)),
        comment=column.comment
        if column.comment is not None
        else (field.get("metadata") or {}).get("comment"),
    )


def protocol_of(detail: Mapping[str, Any]) -> ProtocolInfo:
    reader = opt_int(detail.get("minReaderVersion")) or 1
    writer = opt_int(detail.get("minWriterVersion")) or 2
    features = frozenset(str(f) for f in _json_list(detail.get("tableFeatures")))
    reader_features = (
        frozenset(f for f in features if f in _READER_WRITER_FEATURES) if reader >= 3 else frozenset()
    )
    return ProtocolInfo(reader, writer, reader_features, features if writer >= 7 else frozenset())


def user_properties(props: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(k): str(v)
        for k, v in props.items()
        if k not in _PROTOCOL_KEYS and not str(k).startswith(_PROTOCOL_PREFIX)
    }


def json_map(cell: Any) -> dict[str, Any]:
    value = json.loads(cell) if isinstance(cell, str) else cell
    return dict(value) if isinstance(value, Mapping) else {}


def _json_list(cell: Any) -> list[Any]:
    value = json.loads(cell) if isinstance(cell, str) else cell
    return list(value) if isinstance(value, list) else []


def opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)
