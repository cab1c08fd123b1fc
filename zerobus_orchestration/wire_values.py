"""Arrays to and from the wire types of ``wire_schema``: what the sink sends and the emulator takes apart.

``to_wire`` turns a column of a canonical storage type (``type_map.arrow_storage_type``) into its wire
type, as cheaply as the type allows: string and binary to their large forms widen the offsets and keep
the data buffer; list items and map fields are renamed without touching the values; a DECIMAL becomes
its text (``decimal_text``); only a decimal nested in a list, map or struct makes its parents rebuilt
around the converted child. Every step is an Arrow kernel or numpy operation over the whole column,
never a loop over values in Python.

Decimal text, as the sink writes it (``decimal_text``): the value at its declared scale, ``-`` only
when negative, no exponent, no ``+``, no spaces, at least one digit before the point (``0.05``,
``-12.30``, ``7`` at scale 0). The emulator accepts the same grammar with up to ``scale`` fractional
and ``precision - scale`` integer digits (``decimal_text_refusal``) and reads it back into the exact
DECIMAL with Arrow's own parser (``decimal_from_text``); see docs/adr/0003-emulator-fidelity-limits.md.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.decimal_digits import MAX_SCALE, int64_text

_UNSCALED: Final = pa.decimal128(38, 0)
_PLAIN_SCALE: Final = 6  # Arrow's decimal text is plain (no exponent) for every value at scales up to this


# Scalars from buffers, not ``pa.scalar(value)``: converting a Python value makes pyarrow import pandas
# (if installed), which the write path never does (tests/system/test_write_path_imports.py).
def _text_scalar(text: bytes) -> pa.Scalar:
    offsets = pa.py_buffer(struct.pack("<qq", 0, len(text)))
    return pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(text)])[0]


_MINUS: Final = _text_scalar(b"-")
_EMPTY: Final = _text_scalar(b"")
_ZERO: Final = pa.Array.from_buffers(_UNSCALED, 1, [None, pa.py_buffer(bytes(16))])[0]


def to_wire(values: pa.Array, wire: pa.DataType) -> pa.Array:
    """``values`` (a canonical storage type) as ``wire`` (``wire_schema.wire_type_of_arrow`` of it)."""
    if values.type == wire and _same_names(values.type, wire):
        return values
    if not _holds_decimal(values.type):
        # Renames (list item, map fields), string/binary offset widening: one cast, data buffers kept.
        return values.cast(wire)
    kind = values.type
    if pa.types.is_decimal(kind):
        return decimal_text(values)
    if pa.types.is_list(kind):
        offsets, child = _children_span(values)
        return pa.ListArray.from_arrays(
            offsets, to_wire(child, wire.value_type), type=wire, mask=_null_mask(values)
        )
    if pa.types.is_map(kind):
        offsets = values.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        keys = values.keys.slice(start, end - start)
        items = values.items.slice(start, end - start)
        return pa.MapArray.from_arrays(
            pc.subtract(offsets, offsets[0]),
            to_wire(keys, wire.key_type),
            to_wire(items, wire.item_type),
            type=wire,
            mask=_null_mask(values),
        )
    if pa.types.is_struct(kind):
        children = [to_wire(values.field(i), wire.field(i).type) for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(wire), mask=_null_mask(values))
    return values.cast(wire)


def from_wire(values: pa.Array, table_type: pa.DataType) -> pa.Array:
    """A column in its wire type read back into ``table_type`` (the Delta table's Arrow type), exactly.

    The inverse of ``to_wire``, for the emulator's materialiser. Decimal text must have passed
    ``decimal_text_refusal`` first. What lies beneath a null struct, list or map is not read: a plain
    nested cast would parse the empty strings Arrow keeps under a null struct and fail.
    """
    if not _holds_decimal(table_type):
        return values.cast(table_type)
    if pa.types.is_decimal(table_type):
        return decimal_from_text(values, table_type.precision, table_type.scale)
    if pa.types.is_list(table_type):
        offsets, child = _children_span(values)
        return pa.ListArray.from_arrays(
            offsets, from_wire(child, table_type.value_type), type=table_type, mask=_null_mask(values)
        )
    if pa.types.is_map(table_type):
        offsets = values.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        return pa.MapArray.from_arrays(
            pc.subtract(offsets, offsets[0]),
            from_wire(values.keys.slice(start, end - start), table_type.key_type),
            from_wire(values.items.slice(start, end - start), table_type.item_type),
            type=table_type,
            mask=_null_mask(values),
        )
    if pa.types.is_struct(table_type):
        # flatten(): the struct's own validity merged into each child, so nothing under a null is read.
        children = [from_wire(c, f.type) for c, f in zip(values.flatten(), table_type, strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(table_type), mask=_null_mask(values))
    return values.cast(table_type)


def decimal_text(values: pa.Array) -> pa.Array:
    """A decimal column as ``large_utf8`` text: the declared scale, no exponent, ``-`` only when negative.

    Values whose unscaled integer fits in 64 bits, at scales up to 18, are built from that integer with
    whole-array steps (``decimal_digits.int64_text``; per 20,000-value column 1.5-2.5x cheaper than the
    cast below, whose 128-bit formatting per value was the costliest step of sending decimals). The
    rest go through Arrow's own cast (``_arrow_text``), which writes the same text except an exponent
    for a value whose adjusted exponent (its digit count - 1 - scale) is below -6
    (``Decimal128::ToString`` in cpp/src/arrow/util/decimal.cc, after Java's ``BigDecimal``): ``1E-7``,
    and ``0E-18`` for a zero at scale 18; those few are built from their unscaled integer instead
    (``_built_text``). Exact for all 38 digits; nulls stay null.
    """
    kind = values.type
    if not pa.types.is_decimal128(kind):
        values = values.cast(pa.decimal128(kind.precision, kind.scale))
    if kind.scale > MAX_SCALE:
        return _arrow_text(values)
    built = int64_text(values)
    if built.fits is None:
        return built.text
    wide = pa.Array.from_buffers(
        pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(~built.fits, bitorder="little"))]
    )
    return pc.replace_with_mask(built.text, wide, _arrow_text(values.filter(wide)))


def _arrow_text(values: pa.Array) -> pa.Array:
    """``decimal_text`` of a decimal128 column by Arrow's own cast, its exponents rebuilt: at scales up to
    6 no value has one, so the cast is the text; above, only the values it wrote with one (below 10^-6
    in magnitude, zero among them) are rebuilt."""
    kind = values.type
    text = values.cast(pa.large_string())
    if kind.scale <= _PLAIN_SCALE:
        return text
    exponent = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(exponent).as_py():
        return text
    return pc.replace_with_mask(text, exponent, _built_text(values.filter(exponent)))


def _built_text(values: pa.Array) -> pa.Array:
    """``decimal_text`` of a decimal128 column, built from the unscaled integers: their digits (a scale-0
    decimal's never have an exponent), left-padded with zeros to more than ``scale`` digits, the point
    inserted ``scale`` digits from the right, the sign put back."""
    scale = values.type.scale
    # The same 16-byte little-endian integers read with scale 0: the unscaled value, no arithmetic.
    unscaled = pa.Array.from_buffers(
        _UNSCALED, len(values), values.buffers()[:2], null_count=values.null_count, offset=values.offset
    )
    if scale == 0:
        return unscaled.cast(pa.large_string())
    negative = pc.less(unscaled, _ZERO)
    digits = pc.abs(unscaled).cast(pa.large_string())
    text = pc.utf8_replace_slice(
        pc.utf8_lpad(digits, width=scale + 1, padding="0"), start=-scale, stop=-scale, replacement="."
    )
    if not pc.any(negative).as_py():
        return text
    return pc.if_else(negative, pc.binary_join_element_wise(_MINUS, text, _EMPTY), text)


@dataclass(frozen=True)
class DecimalTextRefusal:
    """Why a column of decimal text does not fit its DECIMAL(p,s): how many values, and the first."""

    count: int
    row: int
    text: str
    precision: int
    scale: int

    def describe(self) -> str:
        return (
            f"{self.count} value(s) are not DECIMAL({self.precision},{self.scale}) text (the first, at row "
            f"{self.row}: {self.text!r}); send plain decimal notation with at most {self.scale} digit(s) "
            f"after the point and {self.precision - self.scale} before it, '-' only when negative, no "
            "exponent, '+' or spaces (e.g. '-12.30')"
        )


def decimal_text_refusal(values: pa.Array, precision: int, scale: int) -> DecimalTextRefusal | None:
    """The values of a text column that are not DECIMAL(precision, scale) text, or None (nulls are fine)."""
    if len(values) == values.null_count:
        return None
    ok = pc.match_substring_regex(values, _grammar(precision, scale))
    bad = pc.and_kleene(pc.is_valid(values), pc.invert(ok))  # a null is a value of any DECIMAL
    count = int(pc.sum(bad).as_py() or 0)
    if not count:
        return None
    row = int(pc.indices_nonzero(bad)[0].as_py())
    return DecimalTextRefusal(count, row, str(values[row].as_py()), precision, scale)


def decimal_from_text(values: pa.Array, precision: int, scale: int) -> pa.Array:
    """Decimal text (``decimal_text_refusal`` found none refused) as the exact DECIMAL(precision, scale).

    Arrow's parser is exact at every precision; the grammar check before it keeps out what it would
    also take (exponents, ``+``) and what Delta's DECIMAL would have to round.
    """
    return values.cast(pa.decimal128(precision, scale), safe=True)


@functools.lru_cache(maxsize=256)
def _grammar(precision: int, scale: int) -> str:
    """A regular expression (RE2) for DECIMAL(precision, scale) text; leading zeros are not digits."""
    whole = precision - scale
    integer = "0+" if whole == 0 else f"(0*[1-9][0-9]{{0,{whole - 1}}}|0+)"
    fraction = f"(\\.[0-9]{{1,{scale}}})?" if scale else ""
    return f"^-?{integer}{fraction}$"


def _holds_decimal(kind: pa.DataType) -> bool:
    if pa.types.is_decimal(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _holds_decimal(kind.value_type)
    if pa.types.is_map(kind):
        return _holds_decimal(kind.key_type) or _holds_decimal(kind.item_type)
    if pa.types.is_struct(kind):
        return any(_holds_decimal(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _same_names(a: pa.DataType, b: pa.DataType) -> bool:
    """Arrow's type equality ignores list item and map field names; the wire does not."""
    return bool(str(a) == str(b))


def _children_span(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list column's offsets rebased to 0 and exactly the child values its (sliced) rows use."""
    offsets = values.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, offsets[0]), values.values.slice(start, end - start)


def _null_mask(values: pa.Array) -> pa.Array | None:
    return values.is_null() if values.null_count else None
