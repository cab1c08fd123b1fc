"""A SQL result spooled to local disk as it is fetched, so the write can check it whole, then send it.

A write checks every row of its input before sending the first (``sink/input_check.py``): a bad value
anywhere refuses it with nothing sent. A DB-API cursor can be read once only, and running the query a
second time would cost the database twice and could return other rows (new rows, another order without
ORDER BY). So the result is fetched once, ``fetch_rows`` at a time (``utils/sql.py``), and each batch is
appended to an Arrow IPC file in a private temporary folder (0700, under ``spool_dir``, default the
system's temporary folder); the write then reads the spool twice, to check and to send. Memory stays at
one fetched batch; disk holds the result once, LZ4-compressed when pyarrow has the codec (Arrow IPC
buffer compression). The folder is deleted by ``close`` (the operator's ``finally``), so a failed try
leaves nothing behind; a retried try fetches the result again.

A column's type may first show as null (its first rows all NULL) and become concrete later, so a batch
whose schema differs from the last starts a new segment file: one IPC file holds one schema.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from zerobus_orchestration.files import Located

WHERE = "the SQL result"


class SqlSpool:
    """The spooled batches of one query result (``files.Rereadable``); ``close`` deletes them."""

    def __init__(self, folder: Path, segments: list[Path], schema: pa.Schema | None, rows: int) -> None:
        self.folder = folder
        self.segments = segments
        self.schema = schema  # the first batch's, or the declared one for an empty result
        self.rows = rows

    def located(self) -> Iterator[Located]:
        first_row = 0
        for segment in self.segments:
            with pa.memory_map(str(segment)) as source:
                reader = ipc.open_file(source)
                for index in range(reader.num_record_batches):
                    batch = reader.get_batch(index)
                    yield Located(batch, WHERE, first_row)
                    first_row += batch.num_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        for located in self.located():
            yield located.batch

    def empty_schema(self) -> pa.Schema | None:
        return self.schema

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def spool(
    batches: Iterable[pa.RecordBatch], *, declared: pa.Schema | None, spool_dir: str | None = None
) -> SqlSpool:
    """Write ``batches`` (a fetch stream) to a new spool folder; nothing of it is kept on failure."""
    folder = Path(tempfile.mkdtemp(prefix="zerobus-sql-spool-", dir=spool_dir))  # 0700
    segments: list[Path] = []
    options = ipc.IpcWriteOptions(compression="lz4" if pa.Codec.is_available("lz4") else None)
    writer: ipc.RecordBatchFileWriter | None = None
    schema: pa.Schema | None = None
    first: pa.Schema | None = None
    rows = 0
    try:
        for batch in batches:
            if writer is None or not batch.schema.equals(schema):
                if writer is not None:
                    writer.close()
                segment = folder / f"segment-{len(segments):05d}.arrow"
                fd = os.open(segment, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.close(fd)
                writer = ipc.new_file(str(segment), batch.schema, options=options)
                segments.append(segment)
                schema = batch.schema
                first = first or schema
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            writer = None
    except BaseException:
        if writer is not None:
            writer.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        # A fetch stream left half read is closed here, on this thread: its cursor must not be closed
        # later by the garbage collector on whichever thread runs it (SQLite refuses that).
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return SqlSpool(folder, segments, first if first is not None else declared, rows)
