"""One Arrow <-> Delta (Databricks SQL) type map, the widening lattice, and its Iceberg-legal subset.

``delta_type(t)``: the Databricks SQL type text for an Arrow type a user hands us
(``STRUCT<a: INT, `odd name`: STRING>``, ``ARRAY<...>``, ``MAP<K, V>``, ``DECIMAL(p,s)``, ...).
``arrow_storage_type(t)``: the Arrow type we actually send for such a column (canonical, see below).
``arrow_type_of_delta(json)``: the inverse, from a Delta schema type (the JSON in ``_delta_log`` and in
Unity Catalog's ``ColumnInfo.type_json``) to the same canonical Arrow type, so live and desired columns
compare with ``==``.

Decisions (docs/architecture.md#arrow-and-delta-types):

- Unsigned integers go to the next signed width holding every value: uint8 -> SMALLINT,
  uint16 -> INT, uint32 -> BIGINT (delta-rs would map them to the same signed width and fail the
  write on the first value above the signed maximum).
- **uint64 is refused.** No Delta integer holds 2**64-1; DECIMAL(20,0) would hold it but turns an
  integer column into a decimal for every reader and Iceberg. The error says to cast to int64 (if the
  values fit) or to decimal128(20, 0) explicitly.
- Timestamps: tz-aware (any zone; stored as UTC) -> TIMESTAMP, naive -> TIMESTAMP_NTZ; both are
  sent as microseconds (Delta's precision).
- Refused with a cast hint: float16, time32/time64, duration, intervals, null, decimal256, unions,
  empty structs, and decimals Delta cannot declare: a negative scale (Arrow allows ``decimal128(5, -2)``,
  Delta needs ``0 <= scale <= precision``) or a scale above the precision. Dictionary and run-end
  encoded columns map as their value type; fixed-size binary and binary views map to BINARY; string
  views and large strings to STRING.

Canonical Arrow types (what ``arrow_storage_type`` returns and ``arrow_type_of_delta`` produces):
int8/16/32/64, float32/64, bool, string, binary, date32, timestamp[us] / timestamp[us, tz=UTC],
decimal128, list<element>, struct, map<key, value>.

Widening (``can_widen_to``) is lossless-only: an integer into an integer whose range contains it,
float32 -> float64, decimal precision increase at equal scale. Integer -> floating point is refused
(a double cannot hold every int64), narrowing is refused, identical types are trivially fine.
``iceberg_legal_widening`` is the Iceberg V2 subset (int -> long, float -> double, decimal precision).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import pyarrow as pa

from zerobus_orchestration.errors import UnsupportedType

_SIMPLE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words that may not appear bare as a STRUCT field name in Databricks SQL type text; quoting is always
# legal, so the list only needs to be a superset of the words that would be misread.
_TYPE_KEYWORDS: Final = frozenset(
    {
        "array", "bigint", "binary", "boolean", "by", "char", "comment", "date", "decimal", "double", "float",
        "from", "int", "integer", "interval", "long", "map", "not", "null", "select", "smallint", "string",
        "struct", "table", "timestamp", "timestamp_ntz", "tinyint", "varchar", "void", "where", "with",
    }
)  # fmt: skip


def quote_identifier(name: str) -> str:
    """Backtick-quote ``name`` for SQL, doubling embedded backticks. Always quotes."""
    return "`" + name.replace("`", "``") + "`"


def _field_name(name: str) -> str:
    if _SIMPLE_NAME.fullmatch(name) and name.lower() not in _TYPE_KEYWORDS:
        return name
    return quote_identifier(name)


def _unsupported(t: pa.DataType, fix: str) -> UnsupportedType:
    return UnsupportedType(f"Arrow type {t} cannot be stored in a Delta table; {fix}")


_SIGNED: Final[Mapping[int, tuple[pa.DataType, str]]] = {
    8: (pa.int8(), "TINYINT"),
    16: (pa.int16(), "SMALLINT"),
    32: (pa.int32(), "INT"),
    64: (pa.int64(), "BIGINT"),
}


def arrow_storage_type(t: pa.DataType) -> pa.DataType:
    """The canonical Arrow type sent for a column declared from ``t``; raises ``UnsupportedType``."""
    if pa.types.is_dictionary(t):
        return arrow_storage_type(t.value_type)
    if pa.types.is_run_end_encoded(t):
        return arrow_storage_type(t.value_type)
    if isinstance(t, pa.BaseExtensionType):
        return arrow_storage_type(t.storage_type)
    if pa.types.is_boolean(t):
        return pa.bool_()
    if pa.types.is_signed_integer(t):
        return t
    if pa.types.is_unsigned_integer(t):
        if t.bit_width == 64:
            raise _unsupported(
                t, "cast it to int64 if every value is below 2**63, or to decimal128(20, 0) explicitly"
            )
        return _SIGNED[t.bit_width * 2][0]
    if pa.types.is_float16(t):
        raise _unsupported(t, "cast it to float32")
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return t
    if pa.types.is_decimal(t):
        _check_decimal_scale(t)
        if pa.types.is_decimal256(t):
            hint = "cast it to decimal128" if t.precision <= 38 else "reduce its precision to 38 or less"
            raise _unsupported(t, hint + " (Delta DECIMAL holds at most 38 digits)")
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return pa.binary()
    if pa.types.is_date(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC") if t.tz is not None else pa.timestamp("us")
    if pa.types.is_time(t):
        raise _unsupported(t, "cast it to a timestamp, or store it as BIGINT microseconds since midnight")
    if pa.types.is_duration(t):
        raise _unsupported(t, "cast it to int64 (a count of its unit) and name the unit in the column")
    if pa.types.is_interval(t):
        raise _unsupported(t, "split it into int64 month/day/nanosecond columns")
    if pa.types.is_null(t):
        # Typically inferred from rows that are all NULL (a SQL column's first rows, an empty CSV column).
        raise _unsupported(
            t,
            "give the column a concrete type (Iceberg V2 has no null type): declare it, e.g. "
            "schema={'<column>': 'BIGINT'} on a SQL or file source or --schema <column>=BIGINT on the CLI, "
            "or cast it before writing",
        )
    if _is_list_like(t):
        item = t.value_field
        return pa.list_(pa.field("element", arrow_storage_type(item.type), nullable=item.nullable))
    if pa.types.is_map(t):
        value = t.item_field
        return pa.map_(
            pa.field("key", arrow_storage_type(t.key_type), nullable=False),
            pa.field("value", arrow_storage_type(value.type), nullable=value.nullable),
        )
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            raise _unsupported(t, "add at least one field or drop the column")
        return pa.struct(
            [pa.field(f.name, arrow_storage_type(f.type), nullable=f.nullable) for f in _struct_fields(t)]
        )
    raise _unsupported(t, "cast it to a supported type (string, binary, a number, a timestamp, ...)")


def _check_decimal_scale(t: pa.DataType) -> None:
    """Refuse scales Delta's ``DECIMAL(p,s)`` cannot declare (it needs ``0 <= s <= p <= 38``)."""
    precision, scale = t.precision, t.scale
    if scale < 0:
        # A negative scale counts in powers of ten: decimal128(5, -2) holds 99999 * 10**2, which needs
        # p - s integer digits at scale 0.
        digits = precision - scale
        fix = (
            f"cast it to decimal128({digits}, 0) (lossless)"
            if digits <= 38
            else f"its values have up to {digits} digits, more than Delta's 38: cast it to float64 "
            "(approximate) or to string"
        )
        raise _unsupported(t, f"Delta DECIMAL needs a scale of 0 or more; {fix}")
    if scale > precision:
        # decimal128(5, 10) holds values below 10**-5, which decimal128(s, s) holds exactly.
        fix = (
            f"cast it to decimal128({scale}, {scale}) (lossless)"
            if scale <= 38
            else "cast it to float64 (approximate) or to string"
        )
        raise _unsupported(t, f"Delta DECIMAL needs a scale no larger than the precision; {fix}")


def _is_list_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _struct_fields(t: pa.StructType) -> list[pa.Field]:
    return [t.field(i) for i in range(t.num_fields)]


def delta_type(t: pa.DataType, *, quote_fields: bool = False) -> str:
    """Databricks SQL type text for Arrow type ``t``; raises ``UnsupportedType`` naming the cast.

    STRUCT field names are backtick-quoted when they are not plain identifiers (always, with
    ``quote_fields``, which the DDL renderer uses so no name is ever pasted bare).
    """
    return _delta_of_storage(arrow_storage_type(t), quote_fields)


def _delta_of_storage(t: pa.DataType, quote_fields: bool = False) -> str:
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_signed_integer(t):
        return _SIGNED[t.bit_width][1]
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t):
        return "STRING"
    if pa.types.is_binary(t):
        return "BINARY"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_list(t):
        return f"ARRAY<{_delta_of_storage(t.value_type, quote_fields)}>"
    if pa.types.is_map(t):
        key, value = _delta_of_storage(t.key_type, quote_fields), _delta_of_storage(t.item_type, quote_fields)
        return f"MAP<{key}, {value}>"
    if pa.types.is_struct(t):
        inner = ", ".join(
            f"{quote_identifier(f.name) if quote_fields else _field_name(f.name)}: "
            f"{_delta_of_storage(f.type, quote_fields)}"
            for f in _struct_fields(t)
        )
        return f"STRUCT<{inner}>"
    raise _unsupported(t, "this is not a canonical storage type")  # unreachable for storage types


# --- Delta schema JSON (``_delta_log`` / Unity ``type_json``) ---------------------------------------

_PRIMITIVE_TO_ARROW: Final[Mapping[str, pa.DataType]] = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_ARROW_TO_PRIMITIVE: Final = {str(v): k for k, v in _PRIMITIVE_TO_ARROW.items()}
_DECIMAL_JSON: Final = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def arrow_type_of_delta(delta_json_type: str | Mapping[str, Any]) -> pa.DataType:
    """Canonical Arrow type for a Delta schema type (a primitive name or a nested JSON object)."""
    if isinstance(delta_json_type, str):
        primitive = _PRIMITIVE_TO_ARROW.get(delta_json_type)
        if primitive is not None:
            return primitive
        match = _DECIMAL_JSON.fullmatch(delta_json_type)
        if match:
            return pa.decimal128(int(match.group(1)), int(match.group(2)))
        raise UnsupportedType(f"Delta type {delta_json_type!r} has no Arrow equivalent here")
    kind = delta_json_type.get("type")
    if kind == "array":
        return pa.list_(
            pa.field(
                "element",
                arrow_type_of_delta(delta_json_type["elementType"]),
                nullable=bool(delta_json_type.get("containsNull", True)),
            )
        )
    if kind == "map":
        return pa.map_(
            pa.field("key", arrow_type_of_delta(delta_json_type["keyType"]), nullable=False),
            pa.field(
                "value",
                arrow_type_of_delta(delta_json_type["valueType"]),
                nullable=bool(delta_json_type.get("valueContainsNull", True)),
            ),
        )
    if kind == "struct":
        return pa.struct(
            [
                pa.field(f["name"], arrow_type_of_delta(f["type"]), nullable=bool(f.get("nullable", True)))
                for f in delta_json_type["fields"]
            ]
        )
    raise UnsupportedType(f"Delta type {dict(delta_json_type)!r} has no Arrow equivalent here")


def delta_json_type(t: pa.DataType) -> str | dict[str, Any]:
    """The Delta schema JSON type for Arrow type ``t`` (what ``arrow_type_of_delta`` reads back)."""
    return _json_of_storage(arrow_storage_type(t))


def _json_of_storage(t: pa.DataType) -> str | dict[str, Any]:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    primitive = _ARROW_TO_PRIMITIVE.get(str(t))
    if primitive is not None:
        return primitive
    if pa.types.is_list(t):
        return {
            "type": "array",
            "elementType": _json_of_storage(t.value_type),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _json_of_storage(t.key_type),
            "valueType": _json_of_storage(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_struct(t):
        return {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": _json_of_storage(f.type), "nullable": f.nullable, "metadata": {}}
                for f in _struct_fields(t)
            ],
        }
    raise _unsupported(t, "this is not a canonical storage type")


# --- widening ----------------------------------------------------------------------------------------

MAX_DECIMAL_PRECISION: Final = 38
"""Delta's and Iceberg V2's largest decimal precision; what an inferred decimal column is created with."""


def roomy_decimal(t: pa.DataType) -> pa.DataType:
    """``DECIMAL(38, s)`` for a decimal storage type (same scale), any other type unchanged.

    A decimal inferred from values (``pa.array`` of Python ``Decimal`` objects, pandas object columns)
    gets the least precision the first rows needed; a table created with it would refuse the next run's
    larger values. Precision 38 at the same scale holds every such value, and the write guard casts a
    narrower decimal into it losslessly.
    """
    if pa.types.is_decimal(t) and t.precision < MAX_DECIMAL_PRECISION:
        return pa.decimal128(MAX_DECIMAL_PRECISION, t.scale)
    return t


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def can_widen_to(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when every ``src`` value is exactly representable in ``dst`` by a widening change.

    Identical types: True. Integer into an integer whose range contains it; float32 -> float64;
    decimal precision increase at equal scale. Everything else (int -> float, narrowing, unit or
    time-zone changes, nested types that differ) is False.
    """
    if src == dst:
        return True
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        lo_s, hi_s = _int_range(src)
        lo_d, hi_d = _int_range(dst)
        return lo_d <= lo_s and hi_s <= hi_d
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return bool(src.bit_width < dst.bit_width)
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(src.scale == dst.scale and src.precision < dst.precision)
    return False


def _iceberg_primitive(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        lo, hi = _int_range(t)
        return "int" if lo >= -(2**31) and hi <= 2**31 - 1 else "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return "decimal"
    return None


def iceberg_legal_widening(src: pa.DataType, dst: pa.DataType) -> bool:
    """``can_widen_to`` restricted to Iceberg V2 promotions: int -> long, float -> double, decimal
    precision increase (int8/int16 are Iceberg ``int``, so int8 -> int32 changes nothing there)."""
    if not can_widen_to(src, dst):
        return False
    if src == dst:
        return True
    kinds = (_iceberg_primitive(src), _iceberg_primitive(dst))
    return kinds in {
        ("int", "int"),
        ("int", "long"),
        ("long", "long"),
        ("float", "double"),
        ("decimal", "decimal"),
    }
