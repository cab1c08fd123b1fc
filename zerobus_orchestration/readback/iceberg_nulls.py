"""Keep a NULL ``ARRAY<STRUCT<...>>`` or ``MAP<K, STRUCT<...>>`` NULL when pyiceberg reads it back.

pyiceberg 0.12 rebuilds a list of structs from the file's offsets and the projected struct values
(``ArrowProjectionVisitor.list``) without the list's validity bitmap, so a NULL array of structs that
the Delta files hold reads back as an empty array: a silent change of value in every read-back and
every replay through ``read_rows`` (apache/iceberg-python#3833, open; the fix proposed upstream is the
same as this one: carry the mask over). Its ``ArrowProjectionVisitor.map`` does the same to a map whose
values are structs (``MapArray.from_arrays(offsets, keys, values)``): a NULL map reads back as ``{}``.
The wrappers below re-apply the validity of the array read from the file when the rebuilt array lost
it, and are no-ops once pyiceberg keeps it itself.

This changes pyiceberg's behaviour for the whole process (it only ever turns a wrong ``[]`` back into
the NULL the file holds). Remove it when the pinned pyiceberg carries the fix:
``tests/unit/zerobus_orchestration/readback/test_iceberg_nulls.py`` shows whether it still acts.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import ArrowProjectionVisitor

_MARK = "_zerobus_keeps_list_nulls"


def keep_list_nulls() -> None:
    """Install the wrappers of ``list`` and ``map`` (idempotent)."""
    original = ArrowProjectionVisitor.list
    if not getattr(original, _MARK, False):

        @functools.wraps(original)
        def list_keeping_nulls(self: Any, list_type: Any, list_array: Any, value_array: Any) -> Any:
            rebuilt = original(self, list_type, list_array, value_array)
            return _with_validity_of(list_array, rebuilt)

        setattr(list_keeping_nulls, _MARK, True)
        ArrowProjectionVisitor.list = list_keeping_nulls  # type: ignore[method-assign]
    original_map = ArrowProjectionVisitor.map
    if not getattr(original_map, _MARK, False):

        @functools.wraps(original_map)
        def map_keeping_nulls(self: Any, map_type: Any, map_array: Any, keys: Any, values: Any) -> Any:
            rebuilt = original_map(self, map_type, map_array, keys, values)
            return _with_validity_of(map_array, rebuilt)

        setattr(map_keeping_nulls, _MARK, True)
        ArrowProjectionVisitor.map = map_keeping_nulls  # type: ignore[method-assign,assignment]


def _with_validity_of(read: Any, rebuilt: Any) -> Any:
    if not isinstance(read, pa.Array) or not isinstance(rebuilt, (pa.ListArray, pa.LargeListArray)):
        return rebuilt
    if not read.null_count or rebuilt.null_count == read.null_count or len(rebuilt) != len(read):
        return rebuilt
    # A NULL list or map occupies no child values (equal offsets), so masking it changes no other row.
    if isinstance(rebuilt, pa.MapArray):
        return pa.MapArray.from_arrays(
            rebuilt.offsets, rebuilt.keys, rebuilt.items, type=rebuilt.type, mask=read.is_null()
        )
    return type(rebuilt).from_arrays(rebuilt.offsets, rebuilt.values, type=rebuilt.type, mask=read.is_null())
