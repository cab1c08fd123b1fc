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
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.ranges import CoverageKey, OffsetRange

_TRANSIENT = pa.system_memory_pool()

ALGORITHM = "sha256/arrow-ipc-v1"
"""Stored with every digest: a later release that hashes differently must not compare against it."""


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


def rows_digest(
    rows: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch], order_by: str | None = None
) -> bytes:
    """The canonical digest of ``rows`` (see the module docstring); ``order_by`` hashes in that order."""
    batch = _one_batch(rows)
    if order_by is not None and batch.num_rows > 1:
        batch = batch.take(pc.sort_indices(batch.column(order_by)))  # Arrow's sort is stable
    names = sorted(batch.schema.names)
    columns = [_canonical_nulls(_decoded(batch.column(name))) for name in names]
    header = repr([(name, str(column.type)) for name, column in zip(names, columns, strict=True)])
    if batch.num_rows:
        # A fresh concatenation has offset 0 and exactly sized buffers: the IPC body of a sliced batch
        # would carry the parent's bytes past the slice, so equal rows could hash differently.
        # Both copies are transient: from the system allocator, since Arrow's default pool keeps freed
        # blocks resident (client RSS, benchmarks/memory.py).
        fresh = pa.RecordBatch.from_arrays(columns, names=names)
        batch = pa.concat_batches([fresh, fresh.slice(0, 0)], memory_pool=_TRANSIENT)
    # SHA-256 over BLAKE2: CPUs with SHA extensions hash it 2-3x faster here, and this runs per batch.
    hasher = hashlib.sha256()
    hasher.update(header.encode("utf-8"))
    hasher.update(str(batch.num_rows).encode("ascii"))
    if batch.num_rows:
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
    plain = _plain(column.type)
    return column if plain == column.type else column.cast(plain)


def _canonical_nulls(column: pa.Array) -> pa.Array:
    # The bytes beneath a null slot of a fixed-width column are unspecified: two reads of the same rows
    # may leave different values there, and the IPC body would hash them. Zero them first (fill_null),
    # then put the nulls back: the validity bitmap still says which slots are null.
    kind = column.type
    if not column.null_count or not _fixed_width(kind):
        return column
    if pa.types.is_boolean(kind):
        zero = pa.scalar(False)
    else:
        zero = pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(bytes(kind.bit_width // 8))])[0]
    filled = pc.fill_null(column, zero)
    return pc.if_else(pc.is_valid(column), filled, pa.scalar(None, type=kind))


def _fixed_width(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_temporal(kind)
        or pa.types.is_decimal(kind)
    )


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
