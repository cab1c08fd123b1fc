"""The spool: input read once into private files on local disk, read back as often as the write needs
(check, then send) with every batch's origin kept, deleted on close, on a failed read and when dropped."""

from __future__ import annotations

import gc
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.files import Located, Rereadable
from zerobus_orchestration.spool import sent_then_deleted, spool


def _batch(start: int, n: int, note: pa.DataType | None = None) -> pa.RecordBatch:
    note = note or pa.string()
    notes = pa.nulls(n, note) if pa.types.is_null(note) else pa.array([f"n{i}" for i in range(n)], note)
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()), "note": notes})


def _items() -> list[Located]:
    # a.csv: a null-typed column first, then text (two schemas); then b.csv.
    return [
        Located(_batch(0, 4, pa.null()), "a.csv", 0),
        Located(_batch(4, 4), "a.csv", 4),
        Located(_batch(8, 2), "a.csv", 8),
        Located(_batch(10, 3), "b.csv", 0),
    ]


def test_batches_are_read_back_in_order_with_their_origin(tmp_path: Path) -> None:
    spooled = spool(_items(), directory=str(tmp_path))
    assert isinstance(spooled, Rereadable)
    assert spooled.rows == 13 and len(spooled.segments) == 3  # a new segment per schema and per origin
    assert stat.S_IMODE(spooled.folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(s.path.stat().st_mode) == 0o600 for s in spooled.segments)
    ids = [v for b in spooled.batches() for v in b["id"].to_pylist()]
    assert ids == list(range(13)) == [v for b in spooled.batches() for v in b["id"].to_pylist()]
    origin = [(x.where, x.first_row, x.batch.num_rows) for x in spooled.located()]
    assert origin == [("a.csv", 0, 4), ("a.csv", 4, 4), ("a.csv", 8, 2), ("b.csv", 0, 3)]
    assert spooled.empty_schema() == _batch(0, 1, pa.null()).schema
    spooled.close()
    assert not spooled.folder.exists()


def test_an_input_without_a_row_has_the_declared_schema(tmp_path: Path) -> None:
    declared = pa.schema([("id", pa.int64())])
    spooled = spool([], declared=declared, directory=str(tmp_path))
    assert (spooled.rows, list(spooled.batches()), spooled.empty_schema()) == (0, [], declared)
    spooled.close()


def test_a_failed_read_or_check_leaves_nothing_and_closes_the_input(tmp_path: Path) -> None:
    closed: list[bool] = []

    def failing() -> Iterator[Located]:
        try:
            yield Located(_batch(0, 2), "a", 0)
            raise ValueError("the source broke")
        finally:
            closed.append(True)

    with pytest.raises(ValueError, match="the source broke"):
        spool(failing(), directory=str(tmp_path))
    assert list(tmp_path.iterdir()) == [] and closed == [True]

    def refuse(item: Located) -> None:
        if item.first_row:
            raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        spool(_items(), directory=str(tmp_path), check=refuse)
    assert list(tmp_path.iterdir()) == []


def test_a_sent_spool_is_deleted_once_read_or_dropped(tmp_path: Path) -> None:
    spooled = spool(_items(), directory=str(tmp_path))
    assert sum(b.num_rows for b in sent_then_deleted(spooled)) == 13
    assert not spooled.folder.exists()
    stopped = spool(_items(), directory=str(tmp_path))
    folder = stopped.folder
    sending = sent_then_deleted(stopped)
    next(sending)  # a write that failed after its first batch
    del sending, stopped
    gc.collect()
    assert not folder.exists()
