"""``coverage.digest.rows_digest`` read from column buffers (``xxh3-128/arrow-buffers-v2``), and the earlier
``sha256/arrow-ipc-v1`` kept bit for bit so records of earlier releases are still checked."""

from __future__ import annotations

import decimal
import itertools

import pyarrow as pa
import pytest

from zerobus_orchestration.coverage.digest import ALGORITHM, ALGORITHMS, SHA256_IPC_V1, rows_digest

_ROWS = pa.record_batch(
    {
        "id": pa.array([1, None, 3], pa.int64()),
        "name": pa.array(["a", None, "ccc"]),
        "ok": pa.array([True, None, False]),
        "amount": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.25")], pa.decimal128(10, 2)),
    }
)


def test_the_earlier_algorithm_still_gives_the_digests_earlier_releases_stored() -> None:
    # Values computed by the release that stored them (sha256/arrow-ipc-v1 was then the only one).
    assert rows_digest(_ROWS, algorithm=SHA256_IPC_V1).hex() == (
        "938ba316b0a98e399b54d62a5fd0a65612821e24d2d3a2b2a7d0e89bfe7c5349"
    )
    assert rows_digest(_ROWS, "id", algorithm=SHA256_IPC_V1).hex() == (
        "cfe1145493e21e4c6beb5296efc670a522a1c2865d247e9f2ec2d90b70e92d8e"
    )


def test_the_current_algorithm_is_pinned() -> None:
    """Changing what is hashed must come with a new ``ALGORITHM`` name (stored records say which)."""
    assert ALGORITHM == "xxh3-128/arrow-buffers-v2"
    assert rows_digest(_ROWS).hex() == "76552ac91dbccd972b9eefcd5fdeaa44"
    assert set(ALGORITHMS) == {ALGORITHM, SHA256_IPC_V1}


def test_an_unknown_algorithm_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="future-v9"):
        rows_digest(_ROWS, algorithm="future-v9")


def _mixed(n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "i": pa.array([None if i % 5 == 0 else i for i in range(n)], pa.int64()),
            "s": pa.array([None if i % 7 == 0 else "v" * (i % 3) for i in range(n)]),
            "ls": pa.array([f"L{i}" for i in range(n)], pa.large_binary()),
            "b": pa.array([None if i % 4 == 0 else i % 3 == 0 for i in range(n)]),
            "fsb": pa.array([bytes([i, i]) if i % 3 else None for i in range(n)], pa.binary(2)),
            "l": pa.array([[i, None] if i % 6 else None for i in range(n)], pa.list_(pa.int32())),
            "mdn": pa.array([pa.MonthDayNano([1, i, 3]) for i in range(n)], pa.month_day_nano_interval()),
            "nul": pa.nulls(n),
        }
    )


@pytest.mark.parametrize("start", [0, 1, 3, 8, 9, 13])
def test_a_slice_at_any_bit_offset_hashes_like_a_fresh_copy_of_its_rows(start: int) -> None:
    """Bitmaps (validity, booleans) of a slice start mid-byte; var-width offsets do not start at 0."""
    parent = _mixed(40)
    piece = parent.slice(start, 20)
    fresh = pa.RecordBatch.from_pylist(piece.to_pylist(), schema=piece.schema)
    assert rows_digest(piece) == rows_digest(fresh)
    assert rows_digest(piece, algorithm=SHA256_IPC_V1) == rows_digest(fresh, algorithm=SHA256_IPC_V1)


@pytest.mark.parametrize("cut", [1, 5, 8, 11])
def test_batching_and_column_order_do_not_change_it(cut: int) -> None:
    rows = _mixed(23)
    pieces = [rows.slice(0, cut), rows.slice(cut)]
    reordered = rows.select(list(reversed(rows.schema.names))).replace_schema_metadata({"k": "v"})
    assert rows_digest(pieces) == rows_digest(rows) == rows_digest(reordered)


@pytest.mark.parametrize("name", ["i", "s", "ls", "b", "fsb", "l", "mdn"])
def test_a_changed_value_changes_it(name: str) -> None:
    rows = _mixed(23)
    values = rows.column(name).to_pylist()
    a, b = next((a, b) for a, b in itertools.pairwise(range(len(values))) if values[a] != values[b])
    values[a], values[b] = values[b], values[a]
    changed = rows.set_column(
        rows.schema.get_field_index(name), name, pa.array(values, rows.column(name).type)
    )
    assert rows_digest(changed) != rows_digest(rows)


@pytest.mark.parametrize("kind", [pa.string(), pa.binary(), pa.large_string()], ids=str)
def test_bytes_beneath_a_null_string_slot_do_not_change_it(kind: pa.DataType) -> None:
    """The format lets a null string slot span bytes; a reader may leave some there, or none."""
    large = pa.types.is_large_string(kind)
    width = 8 if large else 4
    valid = pa.py_buffer(bytes([0b101]))

    def column(offsets: list[int], data: bytes) -> pa.Array:
        raw = b"".join(o.to_bytes(width, "little") for o in offsets)
        return pa.Array.from_buffers(kind, 3, [valid, pa.py_buffer(raw), pa.py_buffer(data)], null_count=1)

    empty_slot, spanning_slot = column([0, 1, 1, 3], b"acc"), column([0, 1, 4, 6], b"axyzcc")
    assert empty_slot.to_pylist() == spanning_slot.to_pylist()
    assert rows_digest(pa.record_batch({"s": empty_slot})) == rows_digest(
        pa.record_batch({"s": spanning_slot})
    )
    assert rows_digest(pa.record_batch({"s": empty_slot})) != rows_digest(
        pa.record_batch({"s": pa.array(["a", "", "cc"], kind)})
    )


def test_bytes_beneath_a_null_boolean_or_fixed_size_binary_slot_do_not_change_it() -> None:
    valid = pa.py_buffer(bytes([0b101]))
    true_beneath = pa.Array.from_buffers(pa.bool_(), 3, [valid, pa.py_buffer(bytes([0b111]))], null_count=1)
    false_beneath = pa.Array.from_buffers(pa.bool_(), 3, [valid, pa.py_buffer(bytes([0b101]))], null_count=1)
    assert rows_digest(pa.record_batch({"b": true_beneath})) == rows_digest(
        pa.record_batch({"b": false_beneath})
    )
    kind = pa.binary(2)
    zeroed = pa.Array.from_buffers(kind, 3, [valid, pa.py_buffer(b"ab\0\0cd")], null_count=1)
    garbage = pa.Array.from_buffers(kind, 3, [valid, pa.py_buffer(b"ab\7\7cd")], null_count=1)
    assert rows_digest(pa.record_batch({"f": zeroed})) == rows_digest(pa.record_batch({"f": garbage}))


def test_a_null_is_not_an_empty_string_nor_false() -> None:
    assert rows_digest(pa.record_batch({"s": pa.array(["a", None])})) != rows_digest(
        pa.record_batch({"s": pa.array(["a", ""])})
    )
    assert rows_digest(pa.record_batch({"b": pa.array([True, None])})) != rows_digest(
        pa.record_batch({"b": pa.array([True, False])})
    )


def test_where_one_string_ends_and_the_next_begins_is_hashed() -> None:
    assert rows_digest(pa.record_batch({"s": pa.array(["ab", "c"])})) != rows_digest(
        pa.record_batch({"s": pa.array(["a", "bc"])})
    )


@pytest.mark.parametrize("kind", [pa.string_view(), pa.binary_view()], ids=str)
def test_view_columns_hash_their_values_not_how_the_views_were_built(kind: pa.DataType) -> None:
    values = ["a", None, "a value longer than twelve bytes, so not inline", ""]
    rows = pa.record_batch(
        {
            "v": pa.array(
                values
                if pa.types.is_string_view(kind)
                else [None if v is None else v.encode() for v in values],
                kind,
            )
        }
    )
    rebuilt = pa.concat_batches([rows, rows]).slice(len(values))
    assert rows_digest(rebuilt) == rows_digest(rows) == rows_digest([rows.slice(0, 1), rows.slice(1)])
