"""A re-run's input compared with an earlier run's rows as a real Delta table holds them, and the replay of
a streamed input after the comparison read part of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from zerobus_orchestration.coverage.run_rows import RunRows
from zerobus_orchestration.coverage.table_truth import TableReader
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.resume.rerun import Replay, Verdict, compare

TAG = "daily[d1@run-1]"


def _table(
    tmp_path: Path, values: list[int], *, offsets: list[int] | None = None, extra: bool = False
) -> RunRows:
    """The run's rows (``v`` as int64, stored shuffled and in two commits, with another run beside them)."""
    uri = str(tmp_path / "t")
    positions = offsets if offsets is not None else list(range(len(values)))
    rows = pa.table(
        {
            "_twg_source": [TAG] * len(values),
            "_twg_offset": pa.array(positions, pa.int64()),
            "v": pa.array(values, pa.int64()),
            "name": [f"n{v}" for v in values],
            "note": [("x" if extra else None)] * len(values),
        }
    )
    order = list(reversed(range(rows.num_rows)))
    half = len(order) // 2
    write_deltalake(uri, rows.take(order[:half]))
    write_deltalake(uri, rows.take(order[half:]), mode="append")
    other = rows.slice(0, 3).set_column(0, "_twg_source", pa.array(["daily[d1@run-0]"] * 3))
    write_deltalake(uri, other, mode="append")
    return RunRows(TableReader("main.d.t", uri, {}), TAG)


def _input(values: list[int], batch: int = 7) -> Iterator[pa.RecordBatch]:
    data = pa.table({"v": pa.array(values, pa.int32()), "name": [f"n{v}" for v in values]})  # narrower ints
    yield from data.to_batches(max_chunksize=batch)


def test_the_same_rows_in_other_batches_and_types_are_the_same(tmp_path: Path) -> None:
    run = _table(tmp_path, list(range(100)))
    found = compare(_input(list(range(100))), run, (OffsetRange(0, 100),), chunk_rows=16)
    assert found.verdict is Verdict.SAME and found.rows == 100


@pytest.mark.parametrize(
    ("values", "verdict", "detail"),
    [
        ([*range(99), 1_000], Verdict.DIFFERS, "positions [96, 100): the values differ"),
        (list(range(60)), Verdict.DIFFERS, "the input has 60 row(s)"),
        (list(range(130)), Verdict.EXTENDS, "rows past position 100"),
    ],
    ids=["a-value", "shorter", "longer"],
)
def test_a_changed_value_a_shorter_or_a_longer_input(
    tmp_path: Path, values: list[int], verdict: Verdict, detail: str
) -> None:
    run = _table(tmp_path, list(range(100)))
    found = compare(_input(values), run, (OffsetRange(0, 100),), chunk_rows=16)
    assert found.verdict is verdict and detail in found.detail, found


def test_a_column_the_run_wrote_and_the_input_lacks_differs(tmp_path: Path) -> None:
    run = _table(tmp_path, list(range(10)), extra=True)
    found = compare(_input(list(range(10))), run, (OffsetRange(0, 10),))
    assert found.verdict is Verdict.DIFFERS and "column 'note'" in found.detail


def test_an_input_filling_the_holes_of_a_run_extends_it(tmp_path: Path) -> None:
    run = _table(tmp_path, [0, 1, 2, 5, 6], offsets=[0, 1, 2, 5, 6])
    delivered = (OffsetRange(0, 3), OffsetRange(5, 7))
    assert compare(_input(list(range(7))), run, delivered).verdict is Verdict.EXTENDS
    changed = [0, 1, 2, 3, 4, 50, 6]
    assert compare(_input(changed), run, delivered).verdict is Verdict.DIFFERS


def test_a_declared_offset_column_compares_by_position_in_any_order(tmp_path: Path) -> None:
    """Kafka-style offsets: the column is the rows' position, in the table (as ``_twg_offset``) and the input."""
    uri = str(tmp_path / "t")
    stored = {"_twg_source": [TAG] * 3, "_twg_offset": pa.array([100, 101, 102], pa.int64())}
    write_deltalake(
        uri, pa.table({**stored, "off": pa.array([100, 101, 102], pa.int64()), "v": [10, 11, 12]})
    )
    run = RunRows(TableReader("main.d.t", uri, {}), TAG)
    shuffled = pa.table({"off": pa.array([102, 100, 101], pa.int64()), "v": [12, 10, 11]})
    delivered = (OffsetRange(100, 103),)
    assert compare(shuffled.to_batches(), run, delivered, offset_column="off").verdict is Verdict.SAME
    more = pa.concat_tables([shuffled, pa.table({"off": pa.array([107], pa.int64()), "v": [17]})])
    assert compare(more.to_batches(), run, delivered, offset_column="off").verdict is Verdict.EXTENDS
    wrong = shuffled.set_column(1, "v", pa.array([12, 10, 99]))
    assert compare(wrong.to_batches(), run, delivered, offset_column="off").verdict is Verdict.DIFFERS


def test_a_stream_read_in_part_is_replayed_whole_from_its_spill() -> None:
    batches = [pa.record_batch({"v": pa.array(range(i, i + 10), pa.int64())}) for i in range(0, 50, 10)]
    wider = pa.record_batch({"v": pa.array([99], pa.int64()), "w": ["x"]})  # a schema change mid-stream
    source = iter([*batches[:2], wider, *batches[2:]])
    replay = Replay(source)
    first = replay.first()
    seen = [next(first), next(first), next(first)]  # the comparison stopped after three batches
    assert seen[2].schema.names == ["v", "w"]
    again = list(replay.again(record=True))
    assert [b.to_pydict() for b in again] == [b.to_pydict() for b in [*batches[:2], wider, *batches[2:]]]
    assert [b.to_pydict() for b in replay.again()] == [b.to_pydict() for b in again], (
        "recorded for a third pass"
    )
    replay.close()
