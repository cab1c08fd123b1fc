"""What a resumed write still sends: its input, less what coverage and then the table show delivered.

``resumed_pieces`` stacks the resume's layers over the input's batches, each a generator:

1. count the rows read (the write reports how many it skipped) and keep the first batch's schema;
2. ``resume.slices.resume_slices``: drop the positions this host's coverage holds, after checking the input
   against their recorded content digests (an input that changed is refused);
3. ``resume.truth.TruthSkip``: drop the positions the table itself shows delivered, read only when a
   row the cache lacks comes up;
4. pair each slice with its first row's position, the form ``ZerobusSink.push_positioned`` takes,
   after recording how far the write got (``HandedOut``, below).

**How far an earlier attempt got.** A killed attempt's last rows can reach the table after the resume
read it (a shared emulator or Zerobus still committing them): neither the cache nor the table shows
them, so the resume sends them again. To count those rows (``rows_resent``, which
docs/guides/coverage-and-resume.md promises never under-counts), each piece's end is recorded in
``resume_marks.sqlite`` next to the coverage cache *before* the piece is handed to the sink, and the next
resume counts every row it sends below that mark. One small SQLite commit per piece (WAL,
``synchronous=NORMAL``: it survives a killed process); a worker on another host has no mark and counts
from the cache and the table only.

A slice pins its whole input batch, so every layer lets go of its batch or slice before it asks the
layer below for the next: client memory over a streamed input stays one input batch plus what is in
flight and what the digest check holds back (``resume/slices.py``;
``tests/system/runtime/test_streamed_write_memory.py``).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage.sqlite_wal import enable_wal
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.owner_only import private_file
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.resume.slices import ResumeSlice, resume_slices
from zerobus_orchestration.resume.truth import TruthSkip, emission_bound, learn_from_table


def resumed_pieces(
    batches: Iterable[pa.RecordBatch],
    key: CoverageKey,
    *,
    table: str,
    source: str,
    offset_column: str | None,
    store: CoverageStore,
    catalog: TableCatalog,
    config: ZerobusConfig,
    commit: Callable[[str], object] | None,
    settle: bool,
    not_before: dt.datetime | None = None,
) -> ResumedPieces:
    """The pieces of ``batches`` a resumed write of ``key`` into ``table`` still sends.

    ``store``: the table's coverage (its ranges and digests of ``key``; what the table shows beyond
    them is recorded there). ``commit`` and ``settle`` are ``learn_from_table``'s. ``not_before``: no
    attempt of ``key`` began before it (``resume.truth.emission_bound``). Nothing is read, from the
    input or the table, before the pieces are iterated.
    """
    read = _RowCounter(batches)
    covered = store.ranges(key)
    handed_out = HandedOut(store.path.with_name(MARKS_FILE), table, key)
    earlier = handed_out.high()  # before this attempt raises it
    # The recorded content digests let the resume refuse, before sending, an input that changed.
    cached = resume_slices(
        covered,
        read,
        offset_column=offset_column,
        table=table,
        digests=store.digests(key) if covered else (),
        source=source,
        partition=key.partition,
    )

    def learn() -> tuple[OffsetRange, ...]:
        # Once the table was read, this host notes when it looked (and the earliest stamp it saw there):
        # a later attempt here reads only the files of rows stamped since (``emission_bound``).
        first_look = store.first_seen(key)
        looked_at = time.time_ns() // 1_000

        def looked(earliest: dt.datetime | None) -> None:
            stamp = looked_at if earliest is None else min(looked_at, int(earliest.timestamp() * 1e6))
            store.touch(key, at_us=stamp)

        return learn_from_table(
            catalog,
            config,
            key,
            table=table,
            source=source,
            cached=covered,
            cache=store,
            commit=commit,
            settle=settle,
            emitted_since=emission_bound(not_before, first_look, config.coverage.emit_margin_s),
            looked=looked,
        )

    # Then what the table itself shows delivered; read only if a row the cache lacks comes up.
    kept = TruthSkip(
        cached,
        learn,
        cached=covered,
        offset_column=offset_column,
        table=table,
        handed_out=earlier,
    )
    return ResumedPieces(read, kept, offset_column, handed_out)


class ResumedPieces:
    """``(batch, first row's position)`` pieces of a resumed write (None: the offset column gives
    positions), counting what was read and what the table's word skipped as they are consumed."""

    def __init__(
        self, read: _RowCounter, kept: TruthSkip, offset_column: str | None, handed_out: HandedOut
    ) -> None:
        self._read = read
        self._kept = kept
        self._offset_column = offset_column
        self._handed_out = handed_out

    def __iter__(self) -> Iterator[tuple[pa.RecordBatch, int | None]]:
        try:
            for piece in self._kept:
                # Write-ahead: recorded before the sink sees the piece, so a crash can only over-count.
                self._handed_out.raise_to(_end_of(piece, self._offset_column))
                yield piece.batch, None if self._offset_column else piece.start_offset
                del piece  # a slice pins its whole input batch: let it go before the source builds the next
        finally:
            self._handed_out.close()

    @property
    def rows_read(self) -> int:
        """Rows of the input read so far (all of them once the pieces are consumed)."""
        return self._read.rows

    @property
    def schema(self) -> pa.Schema | None:
        """The input's first batch's schema, even an empty one's; None before any batch was read."""
        return self._read.schema

    @property
    def rows_skipped_on_table_word(self) -> int:
        """Rows skipped because the table showed them delivered, unverified (``resume.truth``)."""
        return self._kept.rows_skipped

    @property
    def rows_resent(self) -> int:
        """Rows sent at positions an earlier attempt had reached (they may be in the table twice)."""
        return self._kept.rows_resent


MARKS_FILE = "resume_marks.sqlite"
_BUSY_TIMEOUT_S = 30.0


class HandedOut:
    """The highest position (exclusive) resumed writes of ``key`` into ``table`` handed to their sink.

    A separate file from the coverage cache, whose tables and transactions belong to ``coverage/store.py``.
    """

    def __init__(self, path: Path, table: str, key: CoverageKey) -> None:
        self._path = path
        self._params = (table, key.sink, key.source, key.partition)
        self._conn: sqlite3.Connection | None = None
        self._mark = -1  # what this attempt recorded last (-1: not read yet)

    def high(self) -> int:
        """The mark earlier attempts left (0: none)."""
        row = (
            self._connection()
            .execute(
                "SELECT high FROM handed_out WHERE tbl = ? AND sink = ? AND source = ? AND part = ?",
                self._params,
            )
            .fetchone()
        )
        self._mark = 0 if row is None else int(row[0])
        self.close()  # reopened if the pieces are iterated: a write that fails before never leaks it
        return self._mark

    def raise_to(self, end: int) -> None:
        if end <= self._mark:
            return
        self._connection().execute(
            "INSERT INTO handed_out (tbl, sink, source, part, high) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (tbl, sink, source, part) DO UPDATE SET high = max(high, excluded.high)",
            (*self._params, end),
        )
        self._mark = end

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            private_file(self._path)  # 0600 before SQLite opens it: its side files take its mode
            # Autocommit: each mark is its own transaction. The sink's feeder may iterate the pieces on
            # another thread than the one that read the mark; one user at a time.
            conn = sqlite3.connect(
                self._path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            enable_wal(conn, _BUSY_TIMEOUT_S)  # another step's resumed write may open the new file too
            conn.execute("PRAGMA synchronous=NORMAL")  # survives a killed process; power loss may lose one
            conn.execute(
                "CREATE TABLE IF NOT EXISTS handed_out (tbl TEXT NOT NULL, sink TEXT NOT NULL, "
                "source TEXT NOT NULL, part TEXT NOT NULL, high INTEGER NOT NULL, "
                "PRIMARY KEY (tbl, sink, source, part))"
            )
            self._conn = conn
        return self._conn


def _end_of(piece: ResumeSlice, offset_column: str | None) -> int:
    """One past the highest position ``piece`` holds."""
    if offset_column is None:
        return piece.start_offset + int(piece.batch.num_rows)
    highest = pc.max(piece.batch.column(offset_column)).as_py()
    return 0 if highest is None else int(highest) + 1


class _RowCounter:
    """Counts the rows of a batch stream as it is consumed (how many a resumed write skipped)."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = batches
        self.rows = 0
        self.schema: pa.Schema | None = None  # the first batch's, even an empty one's

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            if self.schema is None and isinstance(batch, pa.RecordBatch):
                self.schema = batch.schema
            yield batch
            del batch  # not alive while the source builds the next one (two large batches at once)
