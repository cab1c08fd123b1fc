"""``to_json``: a nested (struct/list/map) column as a STRING column of compact JSON.

The explicit way to send nested values into a STRING target; the write-boundary guard
(``catalog/guard.py``) refuses that write without it and names this function in its message.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa


def _json_value(value: Any, t: pa.DataType) -> Any:
    # Driven by the Arrow type, not the Python value: ``as_py`` turns a map into a list of pairs, so
    # an empty map would look like an empty list.
    if value is None:
        return None
    if pa.types.is_dictionary(t):
        return _json_value(value, t.value_type)
    if pa.types.is_map(t):
        out: dict[str, Any] = {}
        for k, v in value:
            key = str(_json_value(k, t.key_type))
            if key in out:
                # A JSON object holds one value per key: keeping the last would drop data silently.
                raise ValueError(
                    f"to_json: a map holds the key {key!r} more than once, which a JSON object cannot; "
                    "deduplicate the map's keys first"
                )
            out[key] = _json_value(v, t.item_type)
        return out
    if pa.types.is_struct(t):
        return {
            t.field(i).name: _json_value(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields)
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_json_value(v, t.value_type) for v in value]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return [_json_value(v, t.value_type) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def to_json(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A STRING column holding each value as compact JSON (nulls stay null).

    The explicit way to put a struct/list/map column into a STRING target: ``batch.set_column(i, name,
    to_json(batch.column(i)))``. Timestamps and dates become ISO-8601, binary base64, decimals strings;
    maps become objects (a map repeating a key raises ``ValueError``).
    """
    values = column.to_pylist()
    out = [
        None
        if v is None
        else json.dumps(_json_value(v, column.type), separators=(",", ":"), ensure_ascii=False)
        for v in values
    ]
    return pa.array(out, type=pa.string())
