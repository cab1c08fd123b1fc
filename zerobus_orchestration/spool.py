"""Input read once into private files on local disk, then read again as often as a write needs.

A write checks every row of its input before it sends the first (``sink/input_check.py``), so it reads
its input twice. Some inputs should not be read twice: a SQL cursor can be read once only (and a second
query costs the database again and may return other rows), and a CSV file would be parsed twice, the
costliest part of its ingest. They are spooled instead: each batch, as it is read (and checked), is
appended to an Arrow IPC file in a private temporary folder (0700, its files 0600, under ``directory``,
default the system's temporary folder: ``TMPDIR``), and the write sends from there. Memory stays at one
batch; the disk holds the input once, LZ4-compressed when pyarrow has the codec (Arrow IPC buffer
compression), and reading it back is a memory map. ``close`` deletes the folder; a spool no one closed is
deleted when it is garbage-collected, or at the latest when the process exits.

One IPC file holds one schema, and each batch keeps where it came from (the file, the row there) for a
refusal's message: a batch whose schema or origin differs from the last starts a new segment file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from zerobus_orchestration.files import Located


@dataclass(frozen=True)
class _Segment:
    path: Path
    where: str
    first_row: int  # of its first batch, within ``where``


class Spool:
    """Spooled batches (``files.Rereadable``), read back in the order they were spooled."""

    def __init__(self, folder: Path, segments: list[_Segment], schema: pa.Schema | None, rows: int) -> None:
        self.folder = folder
        self.segments = segments
        self.schema = schema  # the first batch's, or the declared one for an input without a row
        self.rows = rows
        self._finalizer = weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)

    def located(self) -> Iterator[Located]:
        for segment in self.segments:
            first_row = segment.first_row
            with pa.memory_map(str(segment.path)) as source:
                reader = ipc.open_file(source)
                for index in range(reader.num_record_batches):
                    batch = reader.get_batch(index)
                    yield Located(batch, segment.where, first_row)
                    first_row += batch.num_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        for located in self.located():
            yield located.batch

    def empty_schema(self) -> pa.Schema | None:
        return self.schema

    def close(self) -> None:
        self._finalizer()


def spool(
    items: Iterable[Located],
    *,
    declared: pa.Schema | None = None,
    directory: str | None = None,
    check: Callable[[Located], None] | None = None,
) -> Spool:
    """``items`` written to a new spool, each passed to ``check`` first (which may raise); nothing of it
    is kept on failure. ``declared``: the schema of an input without a row."""
    folder = Path(tempfile.mkdtemp(prefix="zerobus-spool-", dir=directory))  # 0700
    segments: list[_Segment] = []
    options = ipc.IpcWriteOptions(compression="lz4" if pa.Codec.is_available("lz4") else None)
    writer: ipc.RecordBatchFileWriter | None = None
    last: tuple[pa.Schema, str, int] | None = None  # the open segment's schema, origin and next row
    first: pa.Schema | None = None
    rows = 0
    try:
        for item in items:
            if check is not None:
                check(item)
            batch = item.batch
            if writer is None or last is None or not _continues(last, item):
                if writer is not None:
                    writer.close()
                path = folder / f"segment-{len(segments):05d}.arrow"
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                writer = ipc.new_file(str(path), batch.schema, options=options)
                segments.append(_Segment(path, item.where, item.first_row))
                first = first or batch.schema
            writer.write_batch(batch)
            last = (batch.schema, item.where, item.first_row + batch.num_rows)
            rows += batch.num_rows
            del item, batch  # not alive while the input builds the next batch
        if writer is not None:
            writer.close()
            writer = None
    except BaseException:
        if writer is not None:
            writer.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        # An input left half read is closed here, on this thread: a SQL cursor must not be closed
        # later by the garbage collector on whichever thread runs it (SQLite refuses that).
        close = getattr(items, "close", None)
        if close is not None:
            close()
    return Spool(folder, segments, first if first is not None else declared, rows)


def _continues(last: tuple[pa.Schema, str, int], item: Located) -> bool:
    schema, where, next_row = last
    return item.where == where and item.first_row == next_row and item.batch.schema.equals(schema)


def sent_then_deleted(spooled: Spool) -> Iterator[pa.RecordBatch]:
    """The spool's batches, the spool deleted once they are read or the reading stops."""
    try:
        yield from spooled.batches()
    finally:
        spooled.close()
