"""The DATE/TIMESTAMP span Delta and Iceberg hold, and a vectorised scan for values outside it.

Delta dates and timestamps span 0001-01-01 .. 9999-12-31 (UTC for TIMESTAMP) and so do Iceberg's
readers; Arrow's span is far wider. A value outside would be acknowledged and then never commit, so
the write-boundary guard (``catalog/guard.py``) refuses the batch and names the first such value, at
any depth: a DATE inside a struct, a list or a map is held to the same span (``out_of_range_within``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

_DAY_S = 86_400
_MIN_DAY = -719_162  # 0001-01-01 in days since 1970-01-01
_MAX_DAY = 2_932_896  # 9999-12-31
_UNIT_PER_S = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass(frozen=True)
class OutOfRange:
    """Values of one column outside the span: how many, and the first one (row and raw value)."""

    count: int
    row: int
    value: int
    unit: str  # "d" for dates, else the timestamp unit

    def rendered(self) -> str:
        """The first value (which Python's datetime cannot represent) as its raw count and its year."""
        unit = self.unit
        days = self.value if unit == "d" else self.value / (_UNIT_PER_S[unit] * _DAY_S)
        year = 1970 + int(days // 365.2425)
        name = {"d": "days", "s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
        return f"{self.value} {name[unit]} from 1970-01-01 (about year {year})"


def is_temporal(t: pa.DataType) -> bool:
    return bool(pa.types.is_date(t) or pa.types.is_timestamp(t))


def holds_temporal(t: pa.DataType) -> bool:
    """Whether ``t`` is a DATE/TIMESTAMP or nests one (in a struct field, a list item, a map key or value)."""
    if is_temporal(t):
        return True
    if pa.types.is_dictionary(t):
        return holds_temporal(t.value_type)
    if pa.types.is_map(t):
        return holds_temporal(t.key_type) or holds_temporal(t.item_type)
    return any(holds_temporal(t.field(i).type) for i in range(t.num_fields))


def temporal_bounds(t: pa.DataType) -> tuple[int, int, str] | None:
    """(lowest, highest) storage value Delta/Iceberg hold for ``t``, and its unit; None if not temporal."""
    if pa.types.is_date32(t):
        return _MIN_DAY, _MAX_DAY, "d"
    if pa.types.is_date64(t):
        return _MIN_DAY * _DAY_S * 1_000, (_MAX_DAY + 1) * _DAY_S * 1_000 - 1, "ms"
    if pa.types.is_timestamp(t):
        per_s = _UNIT_PER_S[t.unit]
        return _MIN_DAY * _DAY_S * per_s, (_MAX_DAY + 1) * _DAY_S * per_s - 1, t.unit
    return None


def out_of_range(values: pa.Array) -> OutOfRange | None:
    """The values of a DATE/TIMESTAMP column outside the span, or None (also for other types).

    One min/max pass over the raw storage values; only a batch that fails scans again to find the
    first offending row and count them.
    """
    bounds = temporal_bounds(values.type)
    if bounds is None or len(values) == values.null_count:
        return None
    low, high, unit = bounds
    raw = values.view(pa.int32() if pa.types.is_date32(values.type) else pa.int64())
    extremes = pc.min_max(raw)
    if extremes["min"].as_py() >= low and extremes["max"].as_py() <= high:
        return None
    outside = pc.or_(pc.less(raw, low), pc.greater(raw, high))
    row = pc.index(outside, True).as_py()
    return OutOfRange(pc.sum(outside).as_py(), row, raw[row].as_py(), unit)


def out_of_range_within(values: pa.Array) -> tuple[str, OutOfRange] | None:
    """The first DATE/TIMESTAMP leaf of ``values`` (itself, or nested at any depth) holding values outside
    the span: its path below the column (``.field``, ``.element``, ``.key``, ``.value``; "" for the column
    itself) and the values, whose ``row`` is the row of the batch that holds the first one.

    Values under a null struct, list or map are not values of the table and are not looked at.
    """
    return _within(values, "", None)


def _within(values: pa.Array, path: str, rows: pa.Array | None) -> tuple[str, OutOfRange] | None:
    """``rows``: for each of ``values``' slots, the batch row it belongs to (None: slot i is row i)."""
    t = values.type
    if pa.types.is_dictionary(t):
        return _within(values.dictionary_decode(), path, rows)
    if is_temporal(t):
        hit = out_of_range(values)
        if hit is None:
            return None
        row = hit.row if rows is None else int(rows[hit.row].as_py())
        return path, OutOfRange(hit.count, row, hit.value, hit.unit)
    if pa.types.is_struct(t):
        # flatten() merges the struct's own validity into each field's, so a null struct hides its fields.
        for i, child in enumerate(values.flatten()):
            found = _within(child, f"{path}.{t.field(i).name}", rows)
            if found is not None:
                return found
        return None
    listlike = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    if not (listlike or pa.types.is_map(t)):
        return None
    # flatten() honours the array's slice and skips the items of a null list; the parent indices map
    # each item it returns back to its list's slot, and through ``rows`` to the batch row.
    if pa.types.is_map(t):  # Arrow has no flatten kernel for maps: their entries as a list of structs
        values = values.cast(pa.list_(t.field(0)))
    items = values.flatten()
    parents = pc.list_parent_indices(values)
    if values.null_count:  # parent indices still count a null list's backing items; flatten() does not
        parents = parents.filter(pc.take(values.is_valid(), parents))
    item_rows = parents if rows is None else rows.take(parents)
    if pa.types.is_map(t):
        for name, child in (("key", items.field(0)), ("value", items.field(1))):
            found = _within(child, f"{path}.{name}", item_rows)
            if found is not None:
                return found
        return None
    return _within(items, f"{path}.element", item_rows)
