"""An Arrow Flight frame goes to the write-ahead log as received when the table takes it unchanged.

The frames are real Arrow IPC messages (pyarrow's writer, split the way Flight carries them:
flatbuffer header and body); the WAL payload is read back with the materialiser's own reader.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.records import batches_from_ipc, frame_stream, ipc_message
from zerobus_orchestration.emulator.schema_check import conform, unchanged
from zerobus_orchestration.emulator.session import Decoded, wal_payload

TABLE = "main.s.t"
TARGET = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("v", pa.float64())]
)


def _flight_frames(batch: pa.RecordBatch) -> tuple[bytes, bytes, bytes]:
    """(schema header, batch header, batch body) as a Flight producer sends them."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    schema_message = reader.read_next_message()
    batch_message = reader.read_next_message()
    return (
        schema_message.metadata.to_pybytes(),
        batch_message.metadata.to_pybytes(),
        batch_message.body.to_pybytes(),
    )


def _decode(batch: pa.RecordBatch) -> Decoded:
    schema_header, header, body = _flight_frames(batch)
    decoded, stream = frame_stream(batch.schema, ipc_message(schema_header, b""), header, body)
    return Decoded(decoded, 0, len(body), ipc=stream)


def test_a_frame_stream_holds_exactly_the_frame_batch() -> None:
    batch = pa.record_batch(
        [pa.array([1, 2, 3]), pa.array(["a", None, "c"]), pa.array([0.5, 1.5, None])], TARGET
    )
    decoded = _decode(batch)
    assert decoded.batch is not None and decoded.batch.equals(batch)
    assert decoded.ipc is not None
    [logged] = batches_from_ipc(decoded.ipc)
    assert logged.equals(batch)


def test_a_batch_the_table_takes_as_sent_is_logged_as_received() -> None:
    batch = pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"]), pa.array([0.5, 1.5])], TARGET)
    decoded = _decode(batch)
    assert decoded.batch is not None
    conformed = conform(TABLE, decoded.batch, TARGET, fill_missing=False)
    assert unchanged(decoded.batch, conformed)
    assert wal_payload(decoded, conformed) is decoded.ipc  # no second serialisation


@pytest.mark.parametrize(
    "incoming",
    [
        # int32 ids are widened to the table's int64
        pa.record_batch(
            [pa.array([1, 2], pa.int32()), pa.array(["a", "b"])],
            pa.schema([pa.field("id", pa.int32()), pa.field("name", pa.string())]),
        ),
        # columns in another order than the table's
        pa.record_batch(
            [pa.array(["a", "b"]), pa.array([1, 2])],
            pa.schema([pa.field("name", pa.string()), pa.field("id", pa.int64())]),
        ),
        # another spelling of a (case-insensitive) column name
        pa.record_batch(
            [pa.array([1, 2]), pa.array(["a", "b"])],
            pa.schema([pa.field("ID", pa.int64()), pa.field("name", pa.string())]),
        ),
    ],
    ids=["cast", "reordered", "respelled"],
)
def test_a_batch_conform_changed_is_logged_as_conformed(incoming: pa.RecordBatch) -> None:
    decoded = _decode(incoming)
    assert decoded.batch is not None
    conformed = conform(TABLE, decoded.batch, TARGET, fill_missing=False)
    assert not unchanged(decoded.batch, conformed)
    payload = wal_payload(decoded, conformed)
    assert payload is not decoded.ipc
    [logged] = batches_from_ipc(payload)
    assert logged.schema.names == ["id", "name"]
    assert logged.column("id").type == pa.int64()
    assert logged.column("id").to_pylist() == [1, 2]


def test_a_null_in_a_not_null_column_is_refused_before_any_payload() -> None:
    batch = pa.record_batch(
        [pa.array([1, None]), pa.array(["a", "b"])],
        pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())]),
    )
    decoded = _decode(batch)
    assert decoded.batch is not None
    with pytest.raises(ConformError, match="NULL_IN_REQUIRED_COLUMN"):
        conform(TABLE, decoded.batch, TARGET, fill_missing=False)
