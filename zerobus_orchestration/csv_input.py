"""How CSV text becomes Arrow: what counts as NULL, and a conversion error that names the fix.

**NULL.** An *unquoted* field equal to one of ``null_values`` is NULL, in every column, strings included.
The default list is pyarrow's own (``DEFAULT_NULL_VALUES``: the empty field, ``NULL``, ``null``, ``NA``,
``N/A``, ``NaN``, ``#N/A``, ...). A *quoted* field is never NULL: ``""`` is an empty string and ``"NA"``
the text NA, which is how Spark's CSV writer tells an empty string from a null, and how any file can
say "this really is the text". pyarrow's own default keeps strings non-null (``strings_can_be_null``
off): an empty field then landed in a STRING column as ``''`` while the same field was NULL in a number
column. Give ``null_values=()`` to read every field of a string column as text.

**Conversion errors.** pyarrow names only the column's index ("In CSV column #1: CSV conversion error
to int64: invalid value 'x'"), not its name, nor the row. ``conversion_error`` reads the failing column
again as text (that column alone, on the failure path only), finds the first value that does not
convert, and names the file, the column, the row (data rows counted from 1 after the header) and the
value, and the fix: correct the value, or declare the column's type when it was inferred from the
first rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.csv as pacsv

from zerobus_orchestration.errors import ConfigError, UnsupportedType
from zerobus_orchestration.type_map import delta_type

DEFAULT_NULL_VALUES: tuple[str, ...] = tuple(pacsv.ConvertOptions().null_values)
"""pyarrow's default ``null_values``: what an unquoted CSV field must equal to be NULL."""

_COLUMN_ERROR = re.compile(r"In CSV column #(\d+): (.*)", re.DOTALL)


def convert_options(
    declared: pa.Schema | None,
    null_values: Sequence[str] | None,
    *,
    include: Sequence[str] | None = None,
) -> pacsv.ConvertOptions:
    """The options every CSV read of an input uses (module docstring): declared types, NULL spelling."""
    nulls = DEFAULT_NULL_VALUES if null_values is None else tuple(null_values)
    return pacsv.ConvertOptions(
        column_types=declared,
        null_values=list(nulls),
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        include_columns=list(include) if include is not None else None,
    )


def conversion_error(
    path: str,
    error: pa.ArrowInvalid,
    *,
    found: pa.Schema,
    declared: pa.Schema | None,
    as_text: Callable[[str], Iterator[pa.RecordBatch]],
) -> ConfigError:
    """The error to raise for ``error``, raised while reading ``path`` (columns and types ``found``).

    ``as_text(column)``: the file's batches again, that one column read as text, in row order.
    """
    match = _COLUMN_ERROR.match(str(error))
    index = int(match.group(1)) if match else -1
    if not 0 <= index < len(found):
        return ConfigError(f"cannot read csv input {path}: {error}")
    field = found.field(index)
    cause = match.group(2).strip() if match else str(error)
    inferred = declared is None or declared.get_field_index(field.name) < 0
    where = _first_bad(as_text(field.name), field.type)
    kind = "the type inferred from the file's first rows" if inferred else "the declared type"
    what = f"the value {{!r}} is not a {_sql(field.type)}, {kind}"
    if pa.types.is_null(field.type):  # inferred: a declared column is never of type null
        kind = "no type: the file's first rows hold no value of this column"
        what = "the value {!r} comes after the file's first rows held no value, so no type was inferred"
    at = (
        f", row {where[0] + 1:,} (data rows counted from 1 after the header): {what.format(where[1])}"
        if where is not None
        else f" ({_sql(field.type)}, {kind}): {cause}"
    )
    fix = (
        f"correct the value, or declare the column's type ({field.name}=STRING to keep it as text): "
        f"schema={{{field.name!r}: 'STRING'}} in Python and Airflow, --schema {field.name}=STRING on the CLI"
        if inferred
        else "correct the value, or declare a type that holds it"
    )
    return ConfigError(f"{path}, column {field.name!r}{at}. Fix: {fix}")


def _first_bad(batches: Iterator[pa.RecordBatch], target: pa.DataType) -> tuple[int, str] | None:
    """(row, text) of the first value that does not convert to ``target``, or None if none is found
    (pyarrow's CSV parser and its cast differ on some spellings: the caller then names the cause)."""
    seen = 0
    for batch in batches:
        text = batch.column(0)
        if not _converts(text, target):
            low, high = 0, len(text)  # the first failing row is in [low, high)
            while high - low > 1:
                middle = (low + high) // 2
                if _converts(text.slice(low, middle - low), target):
                    low = middle
                else:
                    high = middle
            return seen + low, str(text[low].as_py())
        seen += batch.num_rows
    return None


def _converts(text: pa.Array, target: pa.DataType) -> bool:
    if pa.types.is_null(target):  # Arrow casts no string to null, not even a null one
        return bool(text.null_count == len(text))
    try:
        text.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _sql(t: pa.DataType) -> str:
    try:
        return delta_type(t)
    except UnsupportedType:
        return str(t)
