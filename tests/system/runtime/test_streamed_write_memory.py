"""``ZerobusRuntime.write`` of a streamed input holds one input batch at a time, on the resume path too.

Client memory over a large stream is bounded by ``pool.max_inflight_bytes`` plus one input batch
(issue 15). Every layer between the reader and the sink (row counting, resume slicing, the table's
word on what was delivered) is a generator; one that keeps its loop variable while it asks for the
next batch keeps the previous input batch alive while the reader builds the next: with 100 MB batches
that was ~100 MB of a 512 MB worker. Batches here are larger than ``pool.max_batch_bytes``, so what
is in flight are compact copies of their slices, and nothing has a reason to keep the parent.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.testing.settings import embedded_test_config

pytestmark = pytest.mark.integration

TABLE = "main.bench.streamed"
ROWS = 4_000  # one int64 column: 32,000 bytes per input batch, sliced at 4,096 bytes
BATCHES = 4
SCHEMA = pa.schema([("v", pa.int64())])


def big(i: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())], schema=SCHEMA)


class Watched:
    """A reader's batches, and whether the previous one's memory was still held when the next was built.

    Each batch's column wraps a numpy array without copying, so the array lives exactly as long as any
    Arrow buffer over it: a zero-copy slice kept anywhere keeps it alive, as it keeps the real memory.
    """

    def __init__(self) -> None:
        self.alive_when_next_built: list[bool] = []
        self._previous: weakref.ref[np.ndarray] | None = None

    def reader(self) -> pa.RecordBatchReader:
        def generate() -> Iterator[pa.RecordBatch]:
            for i in range(BATCHES):
                if self._previous is not None:
                    self.alive_when_next_built.append(self._previous() is not None)
                values = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
                self._previous = weakref.ref(values)
                batch = pa.record_batch([pa.array(values)], schema=SCHEMA)
                del values
                yield batch
                del batch

        return pa.RecordBatchReader.from_batches(SCHEMA, generate())


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ZerobusRuntime]:
    config = embedded_test_config(tmp_path / "wh", pool={"max_batch_bytes": 4_096})
    rt = ZerobusRuntime(config)
    try:
        yield rt
    finally:
        rt.close()


def test_a_fresh_streamed_write_releases_each_batch_before_the_next_is_built(
    runtime: ZerobusRuntime,
) -> None:
    watched = Watched()
    result = runtime.write(TABLE, watched.reader(), source="stream")
    assert result.rows_written == BATCHES * ROWS
    assert watched.alive_when_next_built == [False] * (BATCHES - 1)


def test_a_resumed_streamed_write_releases_each_batch_before_the_next_is_built(
    runtime: ZerobusRuntime,
) -> None:
    # The first write covers the first batches' positions: the second one resumes, checks the delivered
    # rows against their digests and sends only the rest, through every resume layer.
    first = pa.RecordBatchReader.from_batches(SCHEMA, (big(i) for i in range(2)))
    assert runtime.write(TABLE, first, source="stream").rows_written == 2 * ROWS
    watched = Watched()
    result = runtime.write(TABLE, watched.reader(), source="stream")
    assert result.rows_written == (BATCHES - 2) * ROWS  # really resumed: the covered rows were skipped
    assert watched.alive_when_next_built == [False] * (BATCHES - 1)
