"""What a resumed write still sends: its input, less what coverage and then the table show delivered.

``resumed_pieces`` stacks the resume's layers over the input's batches, each a generator:

1. count the rows read (the write reports how many it skipped) and keep the first batch's schema;
2. ``resume.resume_slices``: drop the positions this host's coverage holds, after checking the input
   against their recorded content digests (an input that changed is refused);
3. ``resume_truth.TruthSkip``: drop the positions the table itself shows delivered, read only when a
   row the cache lacks comes up;
4. pair each slice with its first row's position, the form ``ZerobusSink.push_positioned`` takes.

A slice pins its whole input batch, so every layer lets go of its batch or slice before it asks the
layer below for the next: client memory over a streamed input stays one input batch plus what is in
flight and what the digest check holds back (``resume.py``;
``tests/system/runtime/test_streamed_write_memory.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import CoverageStore
from zerobus_orchestration.ranges import CoverageKey
from zerobus_orchestration.resume import resume_slices
from zerobus_orchestration.resume_truth import TruthSkip, learn_from_table


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
) -> ResumedPieces:
    """The pieces of ``batches`` a resumed write of ``key`` into ``table`` still sends.

    ``store``: the table's coverage (its ranges and digests of ``key``; what the table shows beyond
    them is recorded there). ``commit`` and ``settle`` are ``learn_from_table``'s. Nothing is read,
    from the input or the table, before the pieces are iterated.
    """
    read = _RowCounter(batches)
    covered = store.ranges(key)
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
    # Then what the table itself shows delivered; read only if a row the cache lacks comes up.
    kept = TruthSkip(
        cached,
        lambda: learn_from_table(
            catalog,
            config,
            key,
            table=table,
            source=source,
            cached=covered,
            cache=store,
            commit=commit,
            settle=settle,
        ),
        cached=covered,
        offset_column=offset_column,
        table=table,
    )
    return ResumedPieces(read, kept, offset_column)


class ResumedPieces:
    """``(batch, first row's position)`` pieces of a resumed write (None: the offset column gives
    positions), counting what was read and what the table's word skipped as they are consumed."""

    def __init__(self, read: _RowCounter, kept: TruthSkip, offset_column: str | None) -> None:
        self._read = read
        self._kept = kept
        self._offset_column = offset_column

    def __iter__(self) -> Iterator[tuple[pa.RecordBatch, int | None]]:
        for piece in self._kept:
            yield piece.batch, None if self._offset_column else piece.start_offset
            del piece  # a slice pins its whole input batch: let it go before the source builds the next

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
        """Rows skipped because the table showed them delivered, unverified (``resume_truth``)."""
        return self._kept.rows_skipped

    @property
    def rows_resent(self) -> int:
        """Rows sent at positions an earlier attempt had reached (they may be in the table twice)."""
        return self._kept.rows_resent


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
