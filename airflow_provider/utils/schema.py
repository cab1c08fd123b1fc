"""Target schemas written in a DAG file: a ``pyarrow.Schema`` or ``{column: "arrow type"}``.

The mapping form keeps DAG files free of pyarrow imports (cheap to parse) and survives templating.
Types are Arrow aliases (``int64``, ``string``, ``double``, ``bool``, ``date32``, ``timestamp[us]``),
plus ``timestamp[<unit>, tz=<zone>]`` and ``decimal(<precision>, <scale>)``. A trailing ``not null``
makes the column non-nullable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zerobus_orchestration.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

_TIMESTAMP_TZ = re.compile(r"^timestamp\[(s|ms|us|ns),\s*tz=([^\]]+)\]$")
_DECIMAL = re.compile(r"^decimal(?:128)?\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NOT_NULL = re.compile(r"\s+not\s+null$", re.IGNORECASE)


def parse_type(text: str, *, column: str) -> pa.DataType:
    import pyarrow as pa  # at execute time only: DAG files importing the operators stay pyarrow-free

    spec = text.strip()
    if match := _TIMESTAMP_TZ.match(spec):
        return pa.timestamp(match.group(1), tz=match.group(2).strip())
    if match := _DECIMAL.match(spec.lower()):
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    try:
        return pa.type_for_alias(spec.lower())
    except (ValueError, KeyError):
        raise ConfigError(
            f"column {column!r}: unknown Arrow type {text!r}; use e.g. int64, string, double, bool, date32, "
            "timestamp[us], timestamp[us, tz=UTC] or decimal(10, 2)"
        ) from None


def to_arrow_schema(spec: pa.Schema | Mapping[str, Any]) -> pa.Schema:
    """``spec`` as a ``pyarrow.Schema``; a mapping is ``{column: "type[ not null]"}``."""
    import pyarrow as pa

    if isinstance(spec, pa.Schema):
        return spec
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError("schema must be a pyarrow.Schema or a non-empty {column: 'arrow type'} mapping")
    fields = []
    for name, type_text in spec.items():
        if isinstance(type_text, pa.DataType):
            fields.append(pa.field(str(name), type_text))
            continue
        text = str(type_text)
        nullable = _NOT_NULL.search(text) is None
        fields.append(pa.field(str(name), parse_type(_NOT_NULL.sub("", text), column=str(name)), nullable))
    return pa.schema(fields)
