"""Content digests of delivered row ranges, so a resume can check it skips the rows that were delivered.

Coverage says *which positions* of (source, partition) are durable; a digest says *what* was at them.
A resume skips covered positions, so if the input changed between tries (a new file sorting first in
a glob, an unstable SQL order) it would skip rows never delivered and re-send ones that were. The ack
lane records one ``RangeDigest`` per delivered batch (beside its coverage, in the same transaction);
a resume recomputes it over the rows its input holds at those positions and refuses on a mismatch.

The digest is canonical: it depends only on the rows' values, column names and types, never on how
the rows were split into batches or chunks, on column order or on schema metadata. A re-run may batch
its input differently and still match. Rows are the payload columns the caller gave, before the
engine stamps its reserved ``_twg_*`` columns (their values, such as ``_twg_emit_ts``, change per try).
With a declared offset column, rows are hashed in offset order (stable), so a range's digest does
not depend on the order the source yields them in.

``ALGORITHM`` (``xxh3-128/arrow-buffers-v2``) is XXH3-128 over, in order: the header (sorted column
names with their types), the row count, then per column in name order a validity section (one byte
0; or 1 then one byte per row, 1 = valid, when the column holds a null) and its values:

* fixed width (integers, floats, temporal, decimals, fixed-size binary): the little-endian value
  bytes of the rows, with every null slot zeroed (the bytes beneath a null are unspecified);
* boolean: one byte per row, 0 or 1 (0 beneath a null);
* string and binary (and their large forms): each row's length (int32, int64 for the large forms
  and for the view forms, which are hashed as the large ones; 0 for a null) then the rows' bytes;
* anything else (nested and null types): the Arrow IPC body of the column alone, rebuilt with
  offset 0 and exact buffers, preceded by its length (8 bytes).

Numbers are hashed as Arrow holds them: little-endian on every platform this runs on.

These are read from the column's own buffers (a slice's offset applied), not from a serialised copy:
the digest runs per delivered batch on the ack lane, and hashing the buffers costs a fraction of a
copy. What the schema alone decides (the column order, the header, each column's layout) is worked
out once per schema (``_plan``): on a small batch those decisions cost more than the hashing did.
XXH3 is not cryptographic, and need not be: the digest catches an input that changed by accident, not
one forged to collide. ``sha256/arrow-ipc-v1``, recorded by earlier releases, is still
computed for their records (``ALGORITHMS``), so a resume over an older coverage cache still checks them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from zerobus_orchestration.ranges import CoverageKey, OffsetRange

_TRANSIENT = pa.system_memory_pool()

ALGORITHM = "xxh3-128/arrow-buffers-v2"
"""Stored with every digest: a later release that hashes differently must not compare against it."""

SHA256_IPC_V1 = "sha256/arrow-ipc-v1"
"""The algorithm of earlier releases: SHA-256 over the IPC body of a concatenated copy of the rows."""

ALGORITHMS = (ALGORITHM, SHA256_IPC_V1)
"""Every algorithm ``rows_digest`` computes: records of any of them are checked on resume."""

_UNSIGNED: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_NO_NULLS = b"\0"
_HAS_NULLS = b"\1"


@dataclass(frozen=True)
class RangeDigest:
    """The content digest of the rows one delivered batch held.

    ``span``: the positions' envelope; ``runs``: the exact disjoint ranges when the positions have
    gaps (a declared offset column), else None (every position of ``span``). ``rows``: how many rows
    were hashed. ``seq``: store order (later records supersede earlier ones they overlap); 0 before
    the record is stored.
    """

    key: CoverageKey
    span: OffsetRange
    runs: tuple[OffsetRange, ...] | None
    rows: int
    digest: bytes
    algorithm: str = ALGORITHM
    seq: int = 0

    def ranges(self) -> tuple[OffsetRange, ...]:
        """The positions this digest vouches for."""
        return (self.span,) if self.runs is None else self.runs


class _Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def digest(self) -> bytes: ...


def rows_digest(
    rows: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch],
    order_by: str | None = None,
    algorithm: str = ALGORITHM,
) -> bytes:
    """The canonical digest of ``rows`` (see the module docstring); ``order_by`` hashes in that order.

    ``algorithm``: one of ``ALGORITHMS`` (a stored record's own, to check it); ValueError otherwise.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown content digest algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    batch = _one_batch(rows)
    if order_by is not None and batch.num_rows > 1:
        batch = batch.take(pc.sort_indices(batch.column(order_by)))  # Arrow's sort is stable
    if algorithm == ALGORITHM:
        plan = _plan_of(batch.schema)
        if plan is not None:
            return _xxh3_planned(plan, batch)
    names = sorted(batch.schema.names)
    columns = [_decoded(batch.column(name)) for name in names]
    header = repr([(name, str(column.type)) for name, column in zip(names, columns, strict=True)])
    if algorithm == SHA256_IPC_V1:
        return _sha256_ipc_v1(header, names, columns, batch.num_rows)
    hasher: _Hasher = xxhash.xxh3_128()
    hasher.update(header.encode("utf-8"))
    hasher.update(str(batch.num_rows).encode("ascii"))
    if batch.num_rows:
        for column in columns:
            _hash_column(hasher, column)
    return hasher.digest()


_VIEW, _BOOLEAN, _FIXED, _VAR, _IPC = "view", "boolean", "fixed", "var", "ipc"


@dataclass(frozen=True)
class _ColumnPlan:
    """How ``_xxh3_planned`` reads one column: its index, the plain type to cast a dictionary column to
    first (None: none), its layout, byte width (fixed) and offset type (var)."""

    index: int
    plain: pa.DataType | None
    layout: str
    width: int
    offsets: type[np.signedinteger[Any]]


@dataclass(frozen=True)
class _Plan:
    header: bytes
    columns: tuple[_ColumnPlan, ...]


@functools.lru_cache(maxsize=256)
def _plan(schema: pa.Schema) -> _Plan | None:
    """What ``rows_digest`` works out from the schema alone, once per schema: the column order, the
    header, each column's layout. It hashes the same bytes as the general path (``_hash_column``) and
    saves its per-batch, per-column decisions (a small batch's digest was mostly those). None for a
    schema with duplicate names, which the general path handles as it always did."""
    names = schema.names
    if len(set(names)) != len(names):
        return None
    order = sorted(range(len(names)), key=lambda i: names[i])
    columns = []
    described = []
    for i in order:
        kind = schema.field(i).type
        plain = _plain_cached(kind)
        described.append((names[i], str(plain)))
        layout = _layout(plain)
        large = pa.types.is_large_string(plain) or pa.types.is_large_binary(plain)
        width = plain.byte_width if layout is _FIXED else 0
        columns.append(
            _ColumnPlan(i, None if plain == kind else plain, layout, width, np.int64 if large else np.int32)
        )
    return _Plan(repr(described).encode("utf-8"), tuple(columns))


_last_plan: list[tuple[pa.Schema, _Plan | None]] = []


def _plan_of(schema: pa.Schema) -> _Plan | None:
    """``_plan``, with the last schema's kept aside: a stream's batches share one schema, and comparing
    it with the last (~0.5 µs) is cheaper than hashing it for the cache (~6 µs for five columns)."""
    last = _last_plan[-1] if _last_plan else None  # one slot, replaced whole: safe across threads
    if last is not None and (last[0] is schema or last[0].equals(schema)):
        return last[1]
    plan = _plan(schema)
    _last_plan[:] = [(schema, plan)]
    return plan


def _xxh3_planned(plan: _Plan, batch: pa.RecordBatch) -> bytes:
    """``ALGORITHM`` over ``batch`` by its schema's ``_plan`` (the module docstring's sections)."""
    hasher: _Hasher = xxhash.xxh3_128()
    hasher.update(plan.header)
    n = batch.num_rows
    hasher.update(str(n).encode("ascii"))
    if not n:
        return hasher.digest()
    arrays = batch.columns
    for column_plan in plan.columns:
        column = arrays[column_plan.index]
        if column_plan.plain is not None:
            column = column.cast(column_plan.plain)
        layout = column_plan.layout
        if layout is _FIXED and not column.null_count:
            # The common case, inline: no validity bytes to build, the values' bytes as they are.
            hasher.update(_NO_NULLS)
            hasher.update(column.buffers()[1].slice(column.offset * column_plan.width, n * column_plan.width))
        elif layout is _BOOLEAN and not column.null_count:
            hasher.update(_NO_NULLS)
            hasher.update(_bits(column.buffers()[1], column.offset, n).view(np.uint8))
        elif layout is _VAR and not column.null_count:
            hasher.update(_NO_NULLS)
            offsets = _offsets(column, column_plan.offsets)
            hasher.update(offsets[1:] - offsets[:-1])
            data = column.buffers()[2]
            if data is not None and offsets[-1] > offsets[0]:
                hasher.update(data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
        else:
            _hash_column(hasher, column)
    return hasher.digest()


@functools.lru_cache(maxsize=1024)
def _layout(kind: pa.DataType) -> str:
    """How ``_hash_column`` reads a column of ``kind``. Cached: every delivered batch asks per column."""
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return _VIEW
    if pa.types.is_boolean(kind):
        return _BOOLEAN
    if _fixed_width(kind):
        return _FIXED
    if _var_width(kind):
        return _VAR
    return _IPC


def _hash_column(hasher: _Hasher, column: pa.Array) -> None:
    """One column's validity section and values, as the module docstring defines them."""
    layout = _layout(column.type)
    if layout is _VIEW:
        # A view array's buffers depend on how it was built (inline or not, which data buffer): hash
        # its values as the plain large form, whose buffers hold only the values.
        large = pa.large_string() if pa.types.is_string_view(column.type) else pa.large_binary()
        column = column.cast(large)
        layout = _VAR
    kind, n = column.type, len(column)
    valid = _valid(column)
    if valid is None:
        hasher.update(_NO_NULLS)
    else:
        hasher.update(_HAS_NULLS)
        hasher.update(valid.view(np.uint8))
    if layout is _BOOLEAN:
        values = _bits(column.buffers()[1], column.offset, n)
        hasher.update((values if valid is None else values & valid).view(np.uint8))
    elif layout is _FIXED:
        width = kind.byte_width
        data = column.buffers()[1].slice(column.offset * width, n * width)
        if valid is None:
            hasher.update(data)
        elif width in _UNSIGNED:
            # One unsigned integer per row, times its validity: the same bytes with null slots zeroed,
            # several times faster than masking a copy byte by byte.
            hasher.update(np.frombuffer(data, dtype=_UNSIGNED[width]) * valid)
        else:
            rows = np.frombuffer(data, dtype=np.uint8).reshape(n, width).copy()
            rows[~valid] = 0
            hasher.update(rows)
    elif layout is _VAR:
        _hash_var_width(hasher, column, valid)
    else:
        _hash_ipc(hasher, column)


def _hash_var_width(hasher: _Hasher, column: pa.Array, valid: np.ndarray[Any, Any] | None) -> None:
    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    offsets = _offsets(column, np.int64 if large else np.int32)
    lengths = offsets[1:] - offsets[:-1]  # np.diff's values, without its per-call overhead
    if valid is not None and (lengths * ~valid).any():
        # A null slot may span bytes (the format allows it): fill nulls with the empty value so the
        # data holds only the valid rows' bytes; the validity section already said which are null.
        column = pc.fill_null(column, pa.scalar(b"", pa.binary()).cast(column.type))
        offsets = _offsets(column, np.int64 if large else np.int32)
        lengths = offsets[1:] - offsets[:-1]
    hasher.update(lengths)
    data = column.buffers()[2]
    if data is not None and offsets[-1] > offsets[0]:
        hasher.update(data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))


def _hash_ipc(hasher: _Hasher, column: pa.Array) -> None:
    # A fresh concatenation has offset 0 and exactly sized buffers: the IPC body of a sliced array
    # would carry the parent's bytes past the slice, so equal rows could hash differently.
    fresh = pa.RecordBatch.from_arrays([column], names=["c"])
    body = pa.concat_batches([fresh, fresh.slice(0, 0)], memory_pool=_TRANSIENT).serialize(
        memory_pool=_TRANSIENT
    )
    hasher.update(len(body).to_bytes(8, "little"))
    hasher.update(body)


def _valid(column: pa.Array) -> np.ndarray[Any, Any] | None:
    """One bool per row, True where valid; None when the column holds no null."""
    if not column.null_count:
        return None
    bitmap = column.buffers()[0]
    if bitmap is None:  # types without a validity bitmap (null, unions, run-end encoded)
        return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    return _bits(bitmap, column.offset, len(column))


def _bits(bitmap: pa.Buffer, offset: int, n: int) -> np.ndarray[Any, Any]:
    """Bits ``offset .. offset + n`` of an Arrow bitmap (least significant bit first), as bools."""
    first, skip = divmod(offset, 8)
    packed = np.frombuffer(bitmap, dtype=np.uint8, count=(skip + n + 7) // 8, offset=first)
    bits: np.ndarray[Any, Any] = np.unpackbits(packed, count=skip + n, bitorder="little")[skip:]
    return bits.view(np.bool_)


def _offsets(column: pa.Array, dtype: type[np.signedinteger[Any]]) -> np.ndarray[Any, Any]:
    """The ``len(column) + 1`` value offsets of a (large) string or binary column, its slice applied."""
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(
        column.buffers()[1], dtype=dtype, count=len(column) + 1, offset=column.offset * itemsize
    )


def _sha256_ipc_v1(header: str, names: list[str], columns: list[pa.Array], num_rows: int) -> bytes:
    """``SHA256_IPC_V1``, exactly as earlier releases computed it (to check their records)."""
    hasher = hashlib.sha256()
    hasher.update(header.encode("utf-8"))
    hasher.update(str(num_rows).encode("ascii"))
    if num_rows:
        fresh = pa.RecordBatch.from_arrays([_canonical_nulls(c) for c in columns], names=names)
        batch = pa.concat_batches([fresh, fresh.slice(0, 0)], memory_pool=_TRANSIENT)
        hasher.update(batch.serialize(memory_pool=_TRANSIENT))
    return hasher.digest()


def _one_batch(rows: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    if isinstance(rows, pa.RecordBatch):
        return rows
    if isinstance(rows, pa.Table):
        table = rows
    else:
        # Batches of one range may come from different files: metadata and nullability flags are not
        # row content, so they must not keep the pieces from joining (zero-copy).
        pieces = [pa.RecordBatch.from_arrays(piece.columns, names=piece.schema.names) for piece in rows]
        if not pieces:
            raise ValueError("rows_digest needs at least one batch (or a Table) to know the schema")
        table = pa.Table.from_batches(pieces)
    combined: pa.RecordBatch = table.combine_chunks().to_batches()
    if combined:
        return combined[0]
    return pa.RecordBatch.from_pylist([], schema=table.schema)


def _decoded(column: pa.Array) -> pa.Array:
    # A dictionary array's IPC body holds only indices: two reads of the same values may build
    # different dictionaries, and the dictionaries themselves are not in the body. Hash the values.
    plain = _plain_cached(column.type)
    return column if plain == column.type else column.cast(plain)


def _canonical_nulls(column: pa.Array) -> pa.Array:
    # The bytes beneath a null slot of a fixed-width column are unspecified: two reads of the same rows
    # may leave different values there, and the IPC body would hash them. Zero them first (fill_null),
    # then put the nulls back: the validity bitmap still says which slots are null.
    kind = column.type
    if not column.null_count or not _legacy_fixed_width(kind):
        return column
    if pa.types.is_boolean(kind):
        zero = pa.scalar(False)
    else:
        zero = pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(bytes(kind.bit_width // 8))])[0]
    filled = pc.fill_null(column, zero)
    return pc.if_else(pc.is_valid(column), filled, pa.scalar(None, type=kind))


def _fixed_width(kind: pa.DataType) -> bool:
    """Not boolean (bit-packed): every row takes ``kind.byte_width`` bytes."""
    return bool(
        pa.types.is_fixed_size_binary(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_temporal(kind)
        or pa.types.is_decimal(kind)
    )


def _var_width(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    )


def _legacy_fixed_width(kind: pa.DataType) -> bool:
    """The types whose null slots ``SHA256_IPC_V1`` zeroed (boolean included, fixed-size binary not)."""
    return pa.types.is_boolean(kind) or (_fixed_width(kind) and not pa.types.is_fixed_size_binary(kind))


@functools.lru_cache(maxsize=1024)
def _plain_cached(kind: pa.DataType) -> pa.DataType:
    """``_plain``, once per type: every delivered batch asks per column."""
    return _plain(kind)


def _plain(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every dictionary type, at any depth, replaced by its value type."""
    if pa.types.is_dictionary(kind):
        return _plain(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_plain(field.type)) for field in kind])
    if pa.types.is_map(kind):
        return pa.map_(_plain(kind.key_type), _plain(kind.item_type), keys_sorted=kind.keys_sorted)
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_plain(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_plain(kind.value_type)))
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_plain(kind.value_type)), kind.list_size)
    return kind
