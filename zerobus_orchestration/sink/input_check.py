"""The whole-input check: a write's per-batch rules over all of its input, before its first row is sent.

A sink applies its rules batch by batch as it sends, so a bad value in a late batch used to refuse the
write after the earlier batches were delivered (a 200,000-row file with one bad DATE left 131,072 rows),
and a refused first batch left the table its ``ensure`` had just created. ``InputCheck`` applies the
same rules, not a copy of them, before anything is sent or created:

- ``stamping.check_input``: a record batch, no reserved column name, a valid offset column;
- ``slicing.cuts``: no row too large for one ingest call;
- the write-boundary guard, ``guard.conform_batch``, against the target the catalog gate would hand it:
  ``CatalogGate.projected``, the live table, or the one the plan would create or evolve, planned and
  not applied (a second batch schema is planned against the first one's projection).

Input that can be read again (``files.Rereadable``: files, a dataset, a SQL spool, in-memory batches)
is checked whole by ``check_all``, one batch alive at a time; the write then reads it again to send
it. A CSV file is parsed once: its rows are spooled to local disk as they pass (``spool.py``) and sent
from there. A stream can be read once only: ``first_of_each_schema`` checks the first batch of each schema
before the sink's ``ensure`` sees it, so a refused stream never leaves a table behind; its later
batches are checked as they are sent.

A refusal keeps the rule's own message (table, column, fix) and adds where: the file (or the input's
part) and the row there, counted from 1. For a value rule that is the first row the rule refuses,
found by bisecting the refused batch with the same rule (about log2(batch rows) calls on slices).

The check's own conforms count into a scratch registry and log nothing (the send counts each batch's
casts once, as before); a refusal is then recorded in the write's metrics and log once, as the sink's
would have been.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import pyarrow as pa

from zerobus_orchestration.catalog import guard
from zerobus_orchestration.catalog.base import TableState
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.errors import ConfigError, WriteBoundaryError, restated
from zerobus_orchestration.files import DatasetInput, FileFormat, FileInput, Located, Rereadable
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import RESERVED_NAMES
from zerobus_orchestration.sink.slicing import ROW_TOO_LARGE, cuts
from zerobus_orchestration.sink.stamping import Stamper, check_input
from zerobus_orchestration.spool import sent_then_deleted, spool

if TYPE_CHECKING:
    from zerobus_orchestration.sink.sink import ZerobusSink

# Rules decided value by value: the first refused row of a batch can be found by bisecting it.
_VALUE_KINDS = frozenset(
    {
        guard.NULL_INTO_NOT_NULL,
        guard.OUT_OF_RANGE,
        guard.INTEGER_OVERFLOW,
        guard.UNSIGNED_OVERFLOW,
        guard.SUBMICROSECOND_LOSS,
        ROW_TOO_LARGE,
    }
)
NOTHING_SENT = (
    "Nothing of this write was sent, and the table was neither created nor changed: the whole input is "
    "checked before its first row is sent."
)

_checking = contextvars.ContextVar("zerobus_input_check", default=False)
_scratch_metrics: SinkMetrics | None = None
_scratch_lock = threading.Lock()
E = TypeVar("E", bound=BaseException)


class _QuietWhileChecking(logging.Filter):
    """Drops the guard's refusal log lines of the check's own conforms (the refusal is logged once,
    when it is recorded as the write's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _checking.get()


logging.getLogger(guard.__name__).addFilter(_QuietWhileChecking())


def _scratch() -> SinkMetrics:
    global _scratch_metrics
    with _scratch_lock:
        if _scratch_metrics is None:
            _scratch_metrics = SinkMetrics()
        return _scratch_metrics


class InputCheck:
    """The rules of one write (its table, gate, offset column, size limits) applied ahead of sending."""

    def __init__(
        self,
        table: str,
        gate: CatalogGate | None,
        *,
        source_tag: str,
        offset_column: str | None,
        max_batch_bytes: int,
        max_batch_rows: int | None,
        metrics: SinkMetrics | None,
    ) -> None:
        """``source_tag``: what the sink stamps in ``_twg_source`` (its size counts in the row-size rule).
        ``metrics``: the write's, where a refusal is recorded."""
        self.table = table
        self.gate = gate
        self.offset_column = offset_column
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_rows = max_batch_rows
        self.metrics = metrics
        self.rows = 0
        self._per_row = Stamper(source_tag).bytes_per_row
        self._state: TableState | None = None
        self._targets: list[tuple[pa.Schema, pa.Schema]] = []  # batch schema -> payload target

    def check_all(self, located: Iterable[Located]) -> None:
        """Every batch of a re-readable input, one at a time; raises at the first refused one."""
        for _ in self.passed(located):
            pass

    def passed(self, located: Iterable[Located]) -> Iterator[Located]:
        """Each batch once it passed, in order; raises at the first refused one.

        An input that cannot be read (a missing file, a CSV value that does not convert) is refused
        here too, its message naming the table."""
        items = iter(located)
        try:
            while True:
                try:
                    item = next(items, None)
                except ConfigError as exc:
                    raise _with_table(exc, self.table, f"{exc}\n{NOTHING_SENT}") from None
                if item is None:
                    return
                self.check(item)
                yield item
                del item  # not alive while the input builds the next batch
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def first_of_each_schema(
        self, batches: Iterable[pa.RecordBatch], where: str = "the streamed input"
    ) -> Iterator[pa.RecordBatch]:
        """``batches`` as they come, the first batch of each schema checked before it is passed on."""
        row = 0
        for batch in batches:
            if isinstance(batch, pa.RecordBatch) and batch.num_rows and self._target_of(batch) is None:
                self.check(Located(batch, where, row), nothing_sent=row == 0)
            row += batch.num_rows if isinstance(batch, pa.RecordBatch) else 0
            yield batch
            del batch

    def check(self, located: Located, *, nothing_sent: bool = True) -> None:
        """One batch: every rule, or raise naming where (the error's type is the rule's own).

        ``nothing_sent``: whether the refusal may say nothing of the write was sent (a stream's later
        schema is checked after its earlier batches went out)."""
        batch = located.batch
        tail = NOTHING_SENT if nothing_sent else ""
        try:
            check_input(self.table, batch, self.offset_column)
        except (TypeError, ValueError) as exc:
            raise _located(exc, self.table, located, None, tail) from None
        if batch.num_rows == 0:
            return
        try:
            target = self._planned_target(batch.schema)
        except ConfigError as exc:
            raise _located(exc, self.table, located, None, tail) from None
        try:
            self._rules(batch, target)
        except WriteBoundaryError as exc:
            row = self._first_refused_row(batch, target) if exc.kind in _VALUE_KINDS else None
            self._record(batch, target)
            raise _located(exc, self.table, located, row, tail) from None
        self.rows += batch.num_rows

    # -- the rules ------------------------------------------------------------------------------------

    def _rules(self, batch: pa.RecordBatch, target: pa.Schema | None, *, record: bool = False) -> None:
        """The rules on one batch. ``record``: count and log a refusal in the write's metrics (else the
        check's scratch registry, silently)."""
        for _ in cuts(
            batch,
            batch.nbytes,
            limit=self.max_batch_bytes,
            per_row=self._per_row,
            max_rows=self.max_batch_rows,
            table=self.table,
            # The batch's row position in the write, as the sink would stamp it from 0 (unknown here
            # with an offset column, whose values are the positions).
            position=self.rows if self.offset_column is None else None,
        ):
            pass
        if target is None:
            return
        token = _checking.set(not record)
        try:
            guard.conform_batch(
                self.table, batch, target, metrics=self.metrics if record else _scratch(), check_only=True
            )
        finally:
            _checking.reset(token)

    def _record(self, batch: pa.RecordBatch, target: pa.Schema | None) -> None:
        """The refusal counted (and logged) as the write's own, once: the guard run again with its metrics."""
        with contextlib.suppress(WriteBoundaryError):
            self._rules(batch, target, record=True)

    def _first_refused_row(self, batch: pa.RecordBatch, target: pa.Schema | None) -> int | None:
        def refused(rows: pa.RecordBatch) -> bool:
            try:
                self._rules(rows, target)
            except WriteBoundaryError:
                return True
            return False

        return _first_failing(batch, refused)

    # -- the target -----------------------------------------------------------------------------------

    def _target_of(self, batch: pa.RecordBatch) -> pa.Schema | None:
        for schema, target in self._targets:
            if schema.equals(batch.schema, check_metadata=True):
                return target
        return None

    def _planned_target(self, schema: pa.Schema) -> pa.Schema | None:
        """The payload part of the target ``ensure`` would return for ``schema`` (None: no catalog)."""
        if self.gate is None:
            return None
        for seen, target in self._targets:
            if seen.equals(schema, check_metadata=True):
                return target
        self._state = self.gate.projected(self.table, schema, after=self._state)
        full = self._state.arrow_schema()
        # The reserved columns are the engine's stamp, right by construction: the payload is checked.
        target = pa.schema([f for f in full if f.name not in RESERVED_NAMES], metadata=full.metadata)
        self._targets.append((schema, target))
        return target


def _first_failing(batch: pa.RecordBatch, fails: Callable[[pa.RecordBatch], bool]) -> int | None:
    """The first row ``fails`` refuses alone in a prefix (``fails(batch)`` holds), or None if a single
    row is never refused (the refusal is about the batch as a whole)."""
    low, high = 0, batch.num_rows  # every prefix up to ``low`` passes; the prefix up to ``high`` fails
    while high - low > 1:
        middle = (low + high) // 2
        if fails(batch.slice(0, middle)):
            high = middle
        else:
            low = middle
    return low if fails(batch.slice(low, 1)) else None


def _located(exc: E, table: str, located: Located, row: int | None, tail: str) -> E:
    """``exc`` restated with where it happened (and ``tail``); the same type and fields."""
    first = located.first_row
    last = first + located.batch.num_rows
    at = f", row {first + row + 1:,}" if row is not None else f", rows {first + 1:,} .. {last:,}"
    text = f"{exc}\nWhere: {located.where}{at} (rows counted from 1)"
    return _with_table(exc, table, f"{text}\n{tail}" if tail else text)


def _with_table(exc: E, table: str, text: str) -> E:
    """``exc`` restated with message ``text`` (``errors.restated``), naming ``table`` if it does not yet."""
    if table not in text:
        text = f"table {table}: {text}"
    return restated(exc, text)


Sendable: TypeAlias = pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]
"""What a write sends once its input was checked: in-memory data as given, else a stream of batches."""


def checked(data: object, check: InputCheck) -> tuple[Sendable, pa.Schema | None]:
    """``data`` checked as far as its kind allows (module docstring), and what to send of it.

    Returns (what the write sends, the schema the input declares even without a row, or None).
    Re-readable input (``files.Rereadable``, a ``pyarrow.dataset.Dataset``, a Table, a batch, a list
    or tuple of batches) is checked whole now; a stream is returned wrapped, checked as it is read.
    """
    if isinstance(data, pa.RecordBatch | pa.Table):
        check.check_all(_in_memory(data.to_batches() if isinstance(data, pa.Table) else [data]))
        return data, data.schema
    if isinstance(data, list | tuple):
        check.check_all(_in_memory(data))
        first = data[0] if data else None
        return data, first.schema if isinstance(first, pa.RecordBatch) else None  # type: ignore[return-value]
    dataset = _dataset_input(data)
    if dataset is not None:
        data = dataset
    if isinstance(data, FileInput) and data.format is FileFormat.CSV:
        # Parsed once: the rows are spooled as they are checked and sent from the spool (``spool.py``).
        spooled = spool(check.passed(data.located()))
        return sent_then_deleted(spooled), spooled.schema if spooled.rows else data.empty_schema()
    if isinstance(data, Rereadable):
        check.check_all(data.located())
        return data.batches(), data.empty_schema()
    declared = data.schema if isinstance(data, pa.RecordBatchReader) else None
    return check.first_of_each_schema(data), declared  # type: ignore[arg-type]  # check_input names a non-batch


def _in_memory(batches: Iterable[object]) -> Iterator[Located]:
    row = 0
    for batch in batches:
        yield Located(batch, "the input", row)  # type: ignore[arg-type]  # check_input names a non-batch
        row += batch.num_rows if isinstance(batch, pa.RecordBatch) else 0


def _dataset_input(data: object) -> DatasetInput | None:
    """A ``pyarrow.dataset.Dataset`` as a re-readable input (pyarrow.dataset is not imported for it: a
    caller holding a dataset has imported it already)."""
    module = sys.modules.get("pyarrow.dataset")
    if module is None or not isinstance(data, module.Dataset):
        return None
    return DatasetInput(data)


def for_sink(sink: ZerobusSink, metrics: SinkMetrics | None) -> InputCheck:
    """The check of what ``sink`` would send: its table, gate, offset column and size limits."""
    gate = sink.gate if isinstance(sink.gate, CatalogGate) else None
    return InputCheck(
        sink.table,
        gate,
        source_tag=sink.source,
        offset_column=sink.offset_column,
        max_batch_bytes=sink.pool.config.max_batch_bytes,
        max_batch_rows=sink.max_batch_rows,
        metrics=metrics,
    )
