"""Read ``string_view`` / ``binary_view`` Parquet columns through pyiceberg as ``string`` / ``binary``.

A Delta writer may store view types in a data file's Arrow schema (``ARROW:schema``): ``deltalake``
1.6's ``DeltaTable.delete`` rewrites the files it touches with ``string_view`` and ``binary_view``
columns, and Polars >= 1.38 writes them too. pyiceberg 0.12 scans every file with that file's own
physical schema (``_task_to_record_batches`` hands ``fragment.physical_schema`` to
``pyarrow.dataset.Scanner.from_fragment``), and pyarrow has no comparison, filter or take kernels for
view types (apache/arrow#49368), so a filtered scan of such a file fails with ``ArrowNotImplementedError:
Function 'equal' has no kernel matching input types (string_view, string)``, and a table read whole comes
back with view-typed columns no later filter or sort can handle.

The wrapper below hands pyiceberg's scanner the same schema with every view type replaced by its plain
type; pyarrow then casts the column while it reads the file (the values are unchanged: a view is another
layout of the same bytes), and the filter and every later step see ``string`` / ``binary``. It changes
only pyiceberg's module-level ``ds`` (the scans of read-back and ``read_rows``), not pyarrow for the rest
of the process. Remove it when pyarrow gains view kernels or pyiceberg normalises the physical schema:
``tests/unit/zerobus_orchestration/readback/test_iceberg_views.py`` shows whether it still acts.

``plain_types`` does the same for a table or array read another way (DataFusion returns view types).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyiceberg.io import pyarrow as pyiceberg_arrow

_MARK = "_zerobus_reads_views_as_plain"

ArrowData = TypeVar("ArrowData", pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)


def plain_type(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every view type, at any depth, replaced by its plain type."""
    if pa.types.is_string_view(dtype):
        return pa.string()
    if pa.types.is_binary_view(dtype):
        return pa.binary()
    if pa.types.is_list_view(dtype):
        return pa.list_(_plain_field(dtype.value_field))
    if pa.types.is_large_list_view(dtype):
        return pa.large_list(_plain_field(dtype.value_field))
    if pa.types.is_list(dtype):
        return pa.list_(_plain_field(dtype.value_field))
    if pa.types.is_large_list(dtype):
        return pa.large_list(_plain_field(dtype.value_field))
    if pa.types.is_fixed_size_list(dtype):
        return pa.list_(_plain_field(dtype.value_field), dtype.list_size)
    if pa.types.is_map(dtype):
        return pa.map_(_plain_field(dtype.key_field), _plain_field(dtype.item_field), dtype.keys_sorted)
    if pa.types.is_struct(dtype):
        return pa.struct([_plain_field(dtype.field(i)) for i in range(dtype.num_fields)])
    return dtype


def _plain_field(field: pa.Field) -> pa.Field:
    return field.with_type(plain_type(field.type))


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with view types replaced (field names, nullability and metadata kept)."""
    if all(plain_type(field.type) == field.type for field in schema):
        return schema
    return pa.schema([_plain_field(field) for field in schema], metadata=schema.metadata)


def plain_types(data: ArrowData) -> ArrowData:
    """``data`` cast to plain types where it holds view types; unchanged (no copy) otherwise."""
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        schema = data.schema
        wanted = plain_schema(schema)
        return data if wanted is schema else data.cast(wanted)
    wanted_type = plain_type(data.type)
    return data if wanted_type == data.type else data.cast(wanted_type)


def read_views_as_plain() -> None:
    """Install the wrapper on pyiceberg's scans (idempotent)."""
    current = vars(pyiceberg_arrow)["ds"]  # pyiceberg's own ``import pyarrow.dataset as ds``
    if getattr(current, _MARK, False):
        return
    setattr(pyiceberg_arrow, "ds", _dataset_reading_views_as_plain(current))  # noqa: B010


def _dataset_reading_views_as_plain(dataset: Any) -> types.ModuleType:
    """A stand-in for ``pyarrow.dataset`` whose ``Scanner.from_fragment`` reads views as plain types.

    pyiceberg 0.12 uses ``ds.Scanner`` only through ``from_fragment(...).to_batches()``; every other name
    is the module's. The scanner casts while reading, but binds a pushed-down filter to the file's
    physical (view) types all the same, so for a file with views the filter is applied to the cast
    batches instead, the way pyiceberg itself filters after positional deletes.
    """
    original = dataset.Scanner

    class _Scanner:
        @staticmethod
        def from_fragment(
            fragment: Any, *args: Any, schema: pa.Schema | None = None, filter: Any = None, **kwargs: Any
        ) -> Any:
            plain = None if schema is None else plain_schema(schema)
            if plain is schema:
                return original.from_fragment(fragment, *args, schema=schema, filter=filter, **kwargs)
            return _FilteredAfterCast(original.from_fragment(fragment, *args, schema=plain, **kwargs), filter)

    stand_in = types.ModuleType(dataset.__name__, dataset.__doc__)
    stand_in.__dict__.update({k: v for k, v in vars(dataset).items() if not k.startswith("__")})
    stand_in.Scanner = _Scanner  # type: ignore[attr-defined]
    setattr(stand_in, _MARK, True)
    return stand_in


class _FilteredAfterCast:
    """A fragment scanner's batches, already cast to plain types, filtered by ``row_filter``."""

    def __init__(self, scanner: Any, row_filter: Any) -> None:
        self._scanner = scanner
        self._filter = row_filter

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self._scanner.to_batches():
            if self._filter is None:
                yield batch
                continue
            kept = pa.Table.from_batches([batch]).filter(self._filter)
            yield from kept.combine_chunks().to_batches() if kept.num_rows else [batch.slice(0, 0)]
