"""Is a re-run's input what an earlier run of its partition delivered? Compared before anything is sent.

A re-run of a logical partition with the content the table holds is a no-op; with other content it
replaces (derived) or is refused (primary raw) before a row is sent (docs/adr/0007-write-modes.md). So
the input is read once, compared position by position with the earlier run's rows as the table holds
them (``coverage.run_rows``), and read again for the write only if it is to be written.

``compare`` takes the input's rows in chunks of ``CHUNK_ROWS`` positions and the run's rows at the same
positions, cast to the input's types, and compares their content digests (``coverage.digest``): the
verdict is ``SAME`` (every position the run holds, no more, no less), ``EXTENDS`` (every position the run
holds matches and the input has more: rows that arrived since, or the rest of a run that failed part-way)
or ``DIFFERS`` (a value, a column or the length differs). It stops at the first difference, and at the
first row past the run's last position.

``Replay`` lets the write read the input again: input that can be read again (in memory, files, a
dataset) is simply read twice; a stream is spilled, as it is read, to a temporary Arrow IPC file
(``tempfile``: owner-only, deleted on close) that the second pass reads back before the rest of the
stream, so memory stays one chunk whatever the input's length.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.coverage.digest import rows_digest
from zerobus_orchestration.files import DatasetInput, Rereadable
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import OFFSET, is_reserved

if TYPE_CHECKING:
    from zerobus_orchestration.coverage.run_rows import RunRows

CHUNK_ROWS = 65_536
"""Positions compared at a time: the input rows held, and the run's rows read per scan."""


class Verdict(StrEnum):
    SAME = "same"
    EXTENDS = "extends"
    DIFFERS = "differs"


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    detail: str
    """Where and how the input differs (for messages); empty when it does not."""
    rows: int = 0
    """Rows of the input read (all of them for ``SAME``)."""


class Replay:
    """The input, once for the comparison (``first``) and again for the write (``again``).

    Input that can be read again (in-memory batches, ``files.Rereadable``, a ``pyarrow.dataset.Dataset``)
    is read afresh by ``first`` and handed to the write as it is (``again``), so the write checks it whole
    before sending as any write does. A stream is recorded to a spill file as ``first`` reads it;
    ``again`` yields the recorded batches, then the rest of the stream.
    """

    def __init__(self, data: object) -> None:
        self._data = data
        self._reread = _rereading(data)
        self._source: Iterator[pa.RecordBatch] | None = None
        if self._reread is None:
            self._source = iter(data)  # type: ignore[call-overload]  # a stream of record batches
        self._spill: IO[bytes] | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._segments: list[tuple[int, int]] = []  # (start, end) byte ranges, one per schema
        self._schema: pa.Schema | None = None

    def first(self) -> Iterator[pa.RecordBatch]:
        """The input's batches, recorded (a stream) so ``again`` yields them after; stop at any point."""
        if self._reread is not None:
            yield from self._reread()
            return
        assert self._source is not None
        for batch in self._source:
            self._record(batch)
            yield batch
            del batch

    def again(self, *, record: bool = False) -> object:
        """The input from the start, for the write: re-readable input itself; a stream's batches read so
        far, then its rest. ``record``: keep recording the rest of a stream, so a later ``again`` can start
        over once more (a resume that may yet find its input changed)."""
        if self._reread is not None:
            return self._data
        return self._replayed(record)

    def _replayed(self, record: bool) -> Iterator[pa.RecordBatch]:
        self._close_segment()
        if self._spill is not None:
            for start, end in list(self._segments):
                self._spill.seek(start)
                yield from pa.ipc.open_stream(pa.PythonFile(_Window(self._spill, end), mode="r"))
        assert self._source is not None
        if not record:
            yield from self._source
            return
        for batch in self._source:
            self._record(batch)
            yield batch
            del batch

    def close(self) -> None:
        self._close_segment()
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _record(self, batch: pa.RecordBatch) -> None:
        if self._writer is not None and not batch.schema.equals(self._schema):
            self._close_segment()
        if self._writer is None:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile(prefix="zerobus-rerun-")  # noqa: SIM115 (closed by close())
            self._spill.seek(0, 2)
            self._segments.append((self._spill.tell(), -1))
            self._schema = batch.schema
            self._writer = pa.ipc.new_stream(pa.PythonFile(self._spill, mode="w"), batch.schema)
        self._writer.write_batch(batch)

    def _close_segment(self) -> None:
        if self._writer is not None and self._spill is not None:
            self._writer.close()
            self._writer = None
            start, _ = self._segments[-1]
            self._segments[-1] = (start, self._spill.tell())


def _rereading(data: object) -> Callable[[], Iterable[pa.RecordBatch]] | None:
    """How to read ``data`` again from its start, if it can be (None: a stream, read once)."""
    if isinstance(data, pa.RecordBatch):
        return lambda: (data,)
    if isinstance(data, pa.Table):
        batches: list[pa.RecordBatch] = data.to_batches()
        return lambda: batches
    if isinstance(data, list | tuple):
        return lambda: data
    if isinstance(data, Rereadable):
        return data.batches
    dataset = sys.modules.get("pyarrow.dataset")  # a caller holding a dataset has imported the module
    if dataset is not None and isinstance(data, dataset.Dataset):
        return DatasetInput(data).batches
    return None


class _Window:
    """A file object reading ``inner`` from its position up to byte ``end``."""

    def __init__(self, inner: IO[bytes], end: int) -> None:
        self._inner = inner
        self._end = end
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        left = self._end - self._inner.tell()
        if left <= 0:
            return b""
        return self._inner.read(left if size < 0 else min(size, left))

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def compare(
    batches: Iterable[pa.RecordBatch],
    run: RunRows,
    delivered: Sequence[OffsetRange],
    *,
    offset_column: str | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Comparison:
    """How the input ``batches`` relate to the rows run ``run`` delivered at ``delivered`` positions."""
    if not delivered:
        return Comparison(Verdict.EXTENDS, "")
    end = delivered[-1].end
    contiguous = len(delivered) == 1 and delivered[0].start == 0
    if offset_column is not None:
        # Positions are a column's values, in any order: the input is gathered, then compared in one go.
        gathered = [b for b in batches if b.num_rows]
        if not gathered:
            return Comparison(
                Verdict.DIFFERS, f"the input has no row, the run delivered positions up to {end}"
            )
        return _compare_by_column(pa.Table.from_batches(gathered), run, offset_column, contiguous, end)
    held: list[pa.RecordBatch] = []  # the input's rows from position ``checked`` on
    checked = read = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        held.append(batch)
        read += batch.num_rows
        while checked < end and read >= min(checked + chunk_rows, end):
            stop = min(checked + chunk_rows, end)
            found = _compare_chunk(_rows(held, 0, stop - checked), checked, run)
            if found:
                return Comparison(Verdict.DIFFERS, found)
            held = [_rows(held, stop - checked, read - stop)] if read > stop else []
            checked = stop
        if checked >= end and read > end:
            return Comparison(Verdict.EXTENDS, f"the input has rows past position {end}")
    if checked < end:
        return Comparison(
            Verdict.DIFFERS, f"the input has {read} row(s), the run delivered positions up to {end}"
        )
    if not contiguous:
        return Comparison(Verdict.EXTENDS, "the input fills positions the run never delivered", read)
    return Comparison(Verdict.SAME, "", read)


def _rows(held: list[pa.RecordBatch], skip: int, count: int) -> pa.RecordBatch:
    """``count`` rows of ``held`` after its first ``skip``, as one batch."""
    table = pa.Table.from_batches(held).slice(skip, count).combine_chunks()
    return table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)


def _payload(batch: pa.RecordBatch | pa.Table) -> list[str]:
    return [name for name in batch.schema.names if not is_reserved(name)]


def _compare_chunk(rows: pa.RecordBatch, start: int, run: RunRows) -> str:
    """Where input ``rows`` (positions ``start``...) differ from the run's rows there; '' when they do not."""
    columns = _payload(rows)
    stop = start + rows.num_rows
    missing = [c for c in columns if c not in run.columns]
    if missing:
        return f"column(s) {missing} are not in the table"
    extra = [c for c in run.columns if c not in columns]
    theirs = _first_per_position(run.between(start, stop, [*columns, *extra]))
    positions = pc.subtract(theirs[OFFSET], pa.scalar(start, pa.int64()))
    ours = pa.Table.from_batches([rows.select(columns)]).take(positions)
    return _differs(ours, theirs, columns, extra, f"positions [{start}, {stop})")


def _compare_by_column(
    rows: pa.Table, run: RunRows, offset_column: str, contiguous: bool, end: int
) -> Comparison:
    columns = _payload(rows)
    missing = [c for c in columns if c not in run.columns]
    if missing:
        return Comparison(Verdict.DIFFERS, f"column(s) {missing} are not in the table")
    extra = [c for c in run.columns if c not in columns]
    theirs = _first_per_position(run.between(0, end, [*columns, *extra]))
    mine = pc.cast(rows[offset_column], pa.int64()) if rows.num_rows else pa.array([], pa.int64())
    where = pc.index_in(theirs[OFFSET], value_set=mine)
    if theirs.num_rows and pc.any(pc.is_null(where)).as_py():
        return Comparison(Verdict.DIFFERS, "the input lacks positions the run delivered")
    found = _differs(rows.select(columns).take(where), theirs, columns, extra, "the run's positions")
    if found:
        return Comparison(Verdict.DIFFERS, found)
    if rows.num_rows == theirs.num_rows:
        return Comparison(Verdict.SAME, "", rows.num_rows)
    return Comparison(Verdict.EXTENDS, "the input has positions the run never delivered")


def _first_per_position(rows: pa.Table) -> pa.Table:
    """One row per position (a row delivered twice, at-least-once, is compared once)."""
    if rows.num_rows < 2:
        return rows
    offsets = rows[OFFSET].combine_chunks()
    later = pc.not_equal(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
    return rows.filter(pa.concat_arrays([pa.array([True]), later]))


def _differs(ours: pa.Table, theirs: pa.Table, columns: list[str], extra: list[str], where: str) -> str:
    if ours.num_rows != theirs.num_rows:
        return f"{where}: the input has {ours.num_rows} row(s) there, the run {theirs.num_rows}"
    for name in extra:  # the run wrote a column the input no longer has
        if theirs[name].null_count < theirs.num_rows:
            return f"{where}: the run wrote column {name!r}, which the input does not have"
    try:
        as_ours = theirs.select(columns).cast(ours.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        return f"{where}: the table's values do not convert to the input's types ({exc})"
    if rows_digest(ours) != rows_digest(as_ours):
        return f"{where}: the values differ"
    return ""
