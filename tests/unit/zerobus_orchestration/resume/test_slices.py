"""Resume: the rows it yields plus what coverage holds are every input row, with no covered row re-sent."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerobus_orchestration.errors import ResumeInputError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.resume.slices import ResumeSlice, resume_slices

MAX_ROWS = 120


@st.composite
def coverage(draw: st.DrawFn, limit: int = MAX_ROWS + 10) -> list[OffsetRange]:
    spans = []
    for _ in range(draw(st.integers(0, 8))):
        start = draw(st.integers(0, limit))
        spans.append(OffsetRange(start, draw(st.integers(start, limit))))
    return spans


def split(values: list[int], cuts: list[int]) -> list[pa.RecordBatch]:
    """One batch per segment between sorted cut points (empty batches included on purpose)."""
    bounds = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    return [
        pa.record_batch({"row": pa.array(values[a:b], pa.int64())}) for a, b in itertools.pairwise(bounds)
    ]


def covered_positions(spans: list[OffsetRange]) -> set[int]:
    return {p for s in spans for p in range(s.start, s.end)}


@settings(max_examples=200)
@given(st.integers(0, MAX_ROWS), st.lists(st.integers(0, MAX_ROWS), max_size=6), coverage())
def test_positional_resume_sends_exactly_the_gaps(n: int, cuts: list[int], spans: list[OffsetRange]) -> None:
    batches = split(list(range(n)), cuts)  # the "row" column records each row's true position
    sent: list[int] = []
    for start_offset, batch in resume_slices(spans, batches):
        rows = batch.column("row").to_pylist()
        assert rows, "an empty slice is noise for the sink"
        assert rows == list(range(start_offset, start_offset + len(rows))), "start_offset must match"
        sent.extend(rows)
    covered = covered_positions(spans) & set(range(n))
    assert sent == sorted(sent), "input order is kept"
    assert len(sent) == len(set(sent)), "a row is sent at most once"
    assert covered.isdisjoint(sent), "no covered row is re-sent"
    assert covered | set(sent) == set(range(n)), "resumed rows plus coverage are every row"


@settings(max_examples=200)
@given(
    st.lists(st.integers(0, 3 * MAX_ROWS), max_size=MAX_ROWS, unique=True),
    st.booleans(),
    st.lists(st.integers(0, MAX_ROWS), max_size=6),
    coverage(limit=3 * MAX_ROWS),
)
def test_offset_column_resume_sends_exactly_the_uncovered_offsets(
    offsets: list[int], keep_sorted: bool, cuts: list[int], spans: list[OffsetRange]
) -> None:
    if keep_sorted:
        offsets = sorted(offsets)  # Kafka-style: increasing with holes; unsorted also works
    batches = [b.rename_columns(["kafka_offset"]) for b in split(offsets, cuts)]
    sent: list[int] = []
    for start_offset, batch in resume_slices(spans, batches, offset_column="kafka_offset"):
        rows = batch.column("kafka_offset").to_pylist()
        assert rows and rows[0] == start_offset
        sent.extend(rows)
    covered = covered_positions(spans)
    assert sent == [o for o in offsets if o not in covered], "order kept, covered rows dropped, none lost"


def test_slices_are_zero_copy_views_of_the_input() -> None:
    batch = pa.record_batch({"v": pa.array(range(10), pa.int64())})
    (first, second) = list(resume_slices([OffsetRange(3, 6)], [batch]))
    assert first == ResumeSlice(0, batch.slice(0, 3))
    assert second.start_offset == 6 and second.batch.column("v").to_pylist() == [6, 7, 8, 9]
    assert first.batch.column(0).buffers()[1].address == batch.column(0).buffers()[1].address


def test_input_is_pulled_lazily_not_materialised() -> None:
    pulled = 0

    def endless() -> Iterator[pa.RecordBatch]:
        nonlocal pulled
        while True:
            pulled += 1
            yield pa.record_batch({"v": pa.array(range(100), pa.int64())})

    # 250 rows covered: batches 1-2 are skipped whole, batch 3 yields its last 50 rows.
    slices = resume_slices([OffsetRange(0, 250)], endless())
    assert next(slices).start_offset == 250
    assert pulled == 3
    assert next(slices) == ResumeSlice(300, pa.record_batch({"v": pa.array(range(100), pa.int64())}))
    assert pulled == 4


def test_tables_and_readers_are_accepted() -> None:
    table = pa.table({"v": pa.array(range(6), pa.int64())})
    from_table = [(s, b.num_rows) for s, b in resume_slices([OffsetRange(1, 2)], table)]
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))
    from_reader = [(s, b.num_rows) for s, b in resume_slices([OffsetRange(1, 2)], reader)]
    assert from_table == [(0, 1), (2, 4)]
    assert from_reader == [(0, 1), (2, 2), (4, 2)]


def test_nothing_covered_passes_batches_through_and_fully_covered_sends_nothing() -> None:
    batch = pa.record_batch({"o": pa.array([5, 9, 12], pa.int64())})
    assert list(resume_slices([], [batch], offset_column="o")) == [ResumeSlice(5, batch)]
    assert list(resume_slices([OffsetRange(0, 100)], [batch], offset_column="o")) == []
    assert list(resume_slices([OffsetRange(0, 3)], [batch.slice(0, 3)])) == []


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (pa.array([1, None], pa.int64()), "null offset"),
        (pa.array(["a", "b"]), "integer column"),
        (pa.array([-1, 2], pa.int64()), "negative"),
    ],
)
def test_bad_offset_column_names_table_column_and_fix(column: pa.Array, match: str) -> None:
    batch = pa.record_batch({"offset": column})
    with pytest.raises(ResumeInputError, match=rf"table main\.raw\.t, column 'offset'.*{match}.*Fix"):
        list(resume_slices([], [batch], offset_column="offset", table="main.raw.t"))


def test_missing_offset_column_is_named() -> None:
    batch = pa.record_batch({"v": pa.array([1], pa.int64())})
    with pytest.raises(ResumeInputError, match=r"column 'kafka_offset'.*not in the input.*Fix"):
        list(resume_slices([], [batch], offset_column="kafka_offset"))
