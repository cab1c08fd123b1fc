"""Decimal text from the unscaled integers, for the values whose unscaled integer fits in 64 bits.

The wire carries a DECIMAL as its text (``wire_values.decimal_text``). Arrow's decimal-to-string cast
formats every value through 128-bit arithmetic and a string of its own (~50-300 ns a value, the most at
large scales, where it also writes exponents that must be rebuilt); it was the largest single cost of
sending a decimal-heavy batch. Most decimals in practice hold an unscaled integer below 2**63 (every
DECIMAL(18, s), and a DECIMAL(38, 18) below 9.2 in magnitude), and for those the text is built here from
the integers with whole-array steps, never a loop over values in Python:

1. one fixed-width row per value, as wide as the batch's largest value needs (``_Layout``): its integer
   part's digits zero-padded, the point and the ``scale`` fraction digits, four at a time from a
   10,000-entry table of ASCII quadruples (integer division by constants, no 128-bit arithmetic);
2. the sign written just before the first digit shown, and, where the value is below 1 in magnitude, the
   units digit marked so that step 3 keeps it;
3. Arrow's ``ascii_ltrim`` strips the padding zeros (in C++, the only per-byte pass left), then the marked
   units digits are set back to ``0``.

The text is the same as ``decimal_text``'s (its tests compare the two on every path); values whose
unscaled integer does not fit are left to the caller (``Int64Text.fits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_SCALE: Final = 18
"""The largest scale built here (every unscaled integer below 2**63 has at most 19 digits)."""

_QUADS: Final = np.frombuffer(b"".join(b"%04d" % i for i in range(10_000)), dtype="<u4")
# The 1, 2 and 3 most significant fraction digits when the scale is not a multiple of 4.
_HEADS: Final = {
    width: np.frombuffer(b"".join(b"%0*d" % (width, i) for i in range(10**width)), dtype=f"V{width}")
    for width in (1, 2, 3)
}
_POWERS: Final = np.array([10**k for k in range(1, 19)], dtype=np.int64)
_E4: Final = np.int64(10**4)
_ZERO, _POINT, _MINUS, _MARK = (ord(c) for c in "0.-Z")


@dataclass(frozen=True)
class Int64Text:
    """``text``: every value's decimal text (those that do not fit: anything, to be replaced);
    ``fits``: which values' unscaled integers fit in 64 bits (None: all of them)."""

    text: pa.Array
    fits: np.ndarray[Any, np.dtype[np.bool_]] | None


def int64_text(values: pa.Array) -> Int64Text:
    """The decimal text of a ``decimal128`` column of scale at most ``MAX_SCALE`` (the module docstring)."""
    kind = values.type
    scale, n = kind.scale, len(values)
    if not pa.types.is_decimal128(kind) or not 0 <= scale <= MAX_SCALE:
        raise ValueError(f"int64_text takes decimal128 of scale 0..{MAX_SCALE}, not {kind}")
    words = np.frombuffer(values.buffers()[1], dtype=np.int64, count=2 * (values.offset + n))
    words = words[2 * values.offset :].reshape(n, 2)  # little endian: low word, high word
    low = words[:, 0]
    sign = low >> 63  # -1 where negative, else 0
    # The high word is the low word's sign extension; -2**63 is left out, so every |value| is an int64.
    fitting = (words[:, 1] == sign) & (low != np.iinfo(np.int64).min)
    # Nulls' validity as a fresh bitmap (offset 0), and as one bool per value.
    validity = values.is_valid().buffers()[1] if values.null_count else None
    valid = None if validity is None else _unpacked(validity, n)
    if valid is not None:
        fitting |= ~valid  # beneath a null: anything, and nothing is written for it
    magnitude = np.where(fitting, (low ^ sign) - sign, 0)
    whole, fraction = magnitude, None
    if scale:  # not np.divmod: its integer loop is several times slower than a division by a constant
        whole = magnitude // np.int64(10**scale)
        fraction = magnitude - whole * np.int64(10**scale)
    layout = _Layout.of(int(whole.max()) if n else 0, scale)
    rows = layout.rows(whole, fraction)
    # The units digit of a value below 1 in magnitude is a padding zero to ``ascii_ltrim``: mark it.
    below_one = whole == 0
    rows[below_one, layout.units] = _MARK
    negative = sign != 0
    if valid is not None:
        negative &= valid
        below_one &= valid
    if negative.any():
        digits = np.searchsorted(_POWERS, whole[negative], side="right") + 1
        # The sign just before the first digit shown: the trim stops there and keeps it.
        rows[np.flatnonzero(negative), layout.units - digits] = _MINUS
    fixed = pa.Array.from_buffers(pa.binary(layout.width), n, [validity, pa.py_buffer(rows)])
    trimmed = pc.ascii_ltrim(fixed.cast(pa.large_binary()).view(pa.large_string()), "0")
    if below_one.any():
        trimmed = _unmarked(trimmed, below_one, layout.width - layout.units)
    return Int64Text(trimmed, None if fitting.all() else fitting)


def _unpacked(bitmap: pa.Buffer, n: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The first ``n`` bits of an Arrow bitmap as bools (not ``BooleanArray.to_numpy``: that converts
    through pandas and imports it, which the write path never does)."""
    packed = np.frombuffer(bitmap, dtype=np.uint8, count=(n + 7) // 8)
    bits: np.ndarray[Any, np.dtype[np.bool_]] = np.unpackbits(packed, count=n, bitorder="little").view(
        np.bool_
    )
    return bits


@dataclass(frozen=True)
class _Layout:
    """One fixed-width row per value: ``quads`` groups of 4 integer digits (zero-padded; one more column
    before them for the sign), then the point and ``scale`` fraction digits: the most significant
    ``scale % 4`` first, then groups of 4. Each group is a field of a numpy record, filled for every
    row at once from a table of ASCII digits (one long strided copy per field, not one per row)."""

    quads: int
    scale: int

    @classmethod
    def of(cls, largest_whole: int, scale: int) -> _Layout:
        digits = len(str(largest_whole))
        return cls(-(-digits // 4), scale)

    @property
    def units(self) -> int:
        """The column of the units digit."""
        return 4 * self.quads

    @property
    def width(self) -> int:
        return 1 + 4 * self.quads + (1 + self.scale if self.scale else 0)

    def rows(
        self, whole: np.ndarray[Any, np.dtype[np.int64]], fraction: np.ndarray[Any, np.dtype[np.int64]] | None
    ) -> np.ndarray[Any, np.dtype[np.uint8]]:
        n = len(whole)
        head = self.scale % 4
        names = ["pad", *(f"w{i}" for i in range(self.quads))]
        formats: list[Any] = ["u1", *(["<u4"] * self.quads)]
        offsets = [0, *(1 + 4 * i for i in range(self.quads))]
        if self.scale:
            names += ["point", *(["head"] if head else []), *(f"f{i}" for i in range(self.scale // 4))]
            formats += ["u1", *([f"V{head}"] if head else []), *(["<u4"] * (self.scale // 4))]
            start = 1 + 4 * self.quads
            offsets += [
                start,
                *([start + 1] if head else []),
                *(start + 1 + head + 4 * i for i in range(self.scale // 4)),
            ]
        record = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": self.width})
        rows = np.empty(n, dtype=record)
        rows["pad"] = _ZERO
        _fill(rows, [f"w{i}" for i in range(self.quads)], whole)
        if fraction is not None:
            rows["point"] = _POINT
            rest = _fill(rows, [f"f{i}" for i in range(self.scale // 4)], fraction)
            if head:
                rows["head"] = _HEADS[head].take(rest)
        return rows.view(np.uint8).reshape(n, self.width)


def _fill(rows: np.ndarray[Any, Any], names: list[str], values: np.ndarray[Any, np.dtype[np.int64]]) -> Any:
    """Fill the 4-digit fields ``names`` (most significant first) with ``values``' low digits; returns
    what is left above them."""
    for name in reversed(names):
        above = values // _E4
        rows[name] = _QUADS.take(values - above * _E4)
        values = above
    return values


def _unmarked(text: pa.Array, marked: np.ndarray[Any, np.dtype[np.bool_]], from_end: int) -> pa.Array:
    """``text`` with the marked units digits, ``from_end`` bytes before each text's end, set back to 0."""
    n = len(text)
    validity, offsets_buffer, data_buffer = text.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=n + 1, offset=8 * text.offset)
    data = np.frombuffer(data_buffer, dtype=np.uint8, count=int(offsets[-1])).copy()
    data[offsets[1:][marked] - from_end] = _ZERO
    if text.offset and validity is not None:
        validity = text.is_valid().buffers()[1]
    first = int(offsets[0])
    return pa.Array.from_buffers(
        pa.large_string(),
        n,
        [validity, pa.py_buffer(offsets - first if first else offsets), pa.py_buffer(data[first:])],
        null_count=text.null_count,
    )
