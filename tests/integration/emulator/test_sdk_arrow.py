"""The official SDK's Arrow Flight path (``create_arrow_stream``) against the emulator, called directly.

SDK 1.10.0 messages observed here (docs/architecture.md#the-zerobus-service-and-the-official-sdk):
* table missing: ``NonRetriableException("Failed to create stream: code: 'Some requested entity was not
  found', message: \"table c.s.t does not exist ...\"")``
* schema mismatch: ``NonRetriableException("Failed to create stream: code: 'Client specified an invalid
  argument', message: \"SCHEMA_VALIDATION_FAILED: ... FIELD_NOT_IN_TABLE: ...\"")``; the SDK does not put
  the ErrorInfo causes in its text, so the emulator leads the status message with the reason.
* concurrency limit: ``ZerobusException("Failed to create stream: code: 'Some resource has been
  exhausted', ...")`` after ``recovery_retries + 1`` attempts.
* poison mid-stream (INVALID_ARGUMENT): ``NonRetriableException("Stream is closed: code: 'Client specified
  an invalid argument', message: \"<details>\"")`` from ``flush``; unacked batches via
  ``get_unacked_batches()``.
* rotation (``close_stream_duration_ms``): transparent, but ``close()`` while the SDK is still
  reconnecting raises ``ZerobusException("Stream is closed: code: 'The service is currently
  unavailable', message: \"Server requested graceful stream rotation\"")``; send (or wait) on the new
  stream first.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from zerobus import IPCCompression
from zerobus.sdk.shared import NonRetriableException, ZerobusException

from tests.support.emulator_helpers import (
    SCHEMA,
    TABLE,
    arrow_options,
    create_table,
    events,
    open_arrow,
    open_json,
    read_table,
    sdk_for,
    wait_for_streams_opened,
)
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator import wal as wal_module
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration


def ids_in_table(warehouse: Path) -> list[int]:
    return sorted(read_table(warehouse).column("id").to_pylist())


@pytest.mark.parametrize("compression", [IPCCompression.NONE, IPCCompression.LZ4_FRAME, IPCCompression.ZSTD])
def test_acks_wait_flush_close_and_rows_in_delta(
    emulator: Emulator, warehouse: Path, compression: IPCCompression
) -> None:
    stream = open_arrow(emulator, TABLE, SCHEMA, ipc_compression=compression)
    offsets = [stream.ingest_batch(events(list(range(i * 10, i * 10 + 10)))) for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]
    stream.wait_for_offset(offsets[2])
    stream.ingest_batch(pa.Table.from_batches([events([100, 101]), events([102])]))
    stream.flush()
    stream.close()
    emulator.materialize_now(TABLE)
    rows = read_table(warehouse).sort_by("id")
    assert rows.column("id").to_pylist() == [*range(50), 100, 101, 102]
    assert rows.slice(3, 1).to_pylist() == [{"id": 3, "name": "n3", "score": 1.5}]


def test_large_batch_split_into_frames_is_acknowledged_once(emulator: Emulator, warehouse: Path) -> None:
    n = 200_000
    big = pa.record_batch(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.array(["x" * 40] * n),
            "score": pa.array([0.5] * n),
        },
        schema=SCHEMA,
    )
    stream = open_arrow(emulator, TABLE, SCHEMA)
    offset = stream.ingest_batch(big)
    stream.wait_for_offset(offset)
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == n


def test_omitted_nullable_columns_are_filled_with_nulls(emulator: Emulator, warehouse: Path) -> None:
    partial = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    stream = open_arrow(emulator, TABLE, partial)
    stream.ingest_batch(pa.record_batch({"id": pa.array([7, 8], pa.int64())}, schema=partial))
    stream.flush()
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).sort_by("id").to_pylist() == [
        {"id": 7, "name": None, "score": None},
        {"id": 8, "name": None, "score": None},
    ]


def test_background_materialiser_commits_within_time_to_table(emulator: Emulator, warehouse: Path) -> None:
    stream = open_arrow(emulator, TABLE, SCHEMA)
    stream.wait_for_offset(stream.ingest_batch(events([1, 2, 3])))
    stream.close()
    done = threading.Event()
    for _ in range(100):  # time_to_table is 0.2 s in these tests
        if read_table(warehouse).num_rows == 3:
            done.set()
            break
        threading.Event().wait(0.05)
    assert done.is_set(), "the materialiser did not commit acknowledged rows"


def test_unavailable_mid_stream_is_recovered_without_loss(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(FaultSpec(kind=FaultKind.ABORT, after_batches=2, status="UNAVAILABLE"))
    stream = open_arrow(emulator, TABLE, SCHEMA)
    offsets = [stream.ingest_batch(events([i])) for i in range(6)]
    stream.flush()
    stream.close()
    assert offsets == list(range(6))
    assert [a.detail for a in emulator.faults.actions_of(FaultKind.ABORT)] == [
        "ended the stream with UNAVAILABLE at batch 3"
    ], "the abort fault never acted"
    assert emulator.streams_opened(TABLE) == 2, "the SDK did not reconnect"
    emulator.materialize_now(TABLE)
    # Batch 3 was dropped by the fault (never written), so exactly-once holds here.
    assert ids_in_table(warehouse) == list(range(6))


def test_poison_mid_stream_surfaces_non_retryable_with_unacked_batches(
    emulator: Emulator, warehouse: Path
) -> None:
    emulator.faults.add(
        FaultSpec(kind=FaultKind.ABORT, after_batches=2, status="INVALID_ARGUMENT", message="bad")
    )
    stream = open_arrow(emulator, TABLE, SCHEMA)
    for i in range(5):
        stream.ingest_batch(events([i]))
    with pytest.raises(NonRetriableException, match="invalid argument"):
        stream.flush()
    assert [a.spec.status for a in emulator.faults.actions_of(FaultKind.ABORT)] == ["INVALID_ARGUMENT"]
    unacked = stream.get_unacked_batches()
    assert [b.column(0).to_pylist() for b in unacked] == [[2], [3], [4]]
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == [0, 1]


def test_rotation_moves_to_a_new_stream(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(FaultSpec(kind=FaultKind.ROTATE, after_batches=2, grace_ms=1000))
    stream = open_arrow(emulator, TABLE, SCHEMA)
    for i in range(5):
        stream.ingest_batch(events([i]))
    stream.flush()
    assert [f.kind for f in emulator.faults.acted] == [FaultKind.ROTATE], "no rotation signal was sent"
    assert wait_for_streams_opened(emulator, TABLE, 2) == 2, "the SDK did not move to a new stream"
    stream.wait_for_offset(stream.ingest_batch(events([5])))  # goes out on the rotated stream
    stream.flush()
    stream.close()
    assert emulator.streams_opened(TABLE) == 2
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == list(range(6))  # every row exactly once across both streams


def test_withheld_acks_time_out_and_recover_at_least_once(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(FaultSpec(kind=FaultKind.WITHHOLD_ACKS, after_batches=1))
    stream = open_arrow(emulator, TABLE, SCHEMA, server_lack_of_ack_timeout_ms=800)
    for i in range(3):
        stream.ingest_batch(events([i]))
    stream.flush()
    stream.close()
    withheld = emulator.faults.actions_of(FaultKind.WITHHOLD_ACKS)
    expected = [f"withheld the ack of batch {n}" for n in (2, 3)]
    assert [a.detail for a in withheld] == expected, "the withhold fault never acted"
    assert len({a.stream_id for a in withheld}) == 1
    # What the client did about it: its lack-of-ack timeout moved it to a second stream.
    assert emulator.streams_opened(TABLE) == 2
    emulator.materialize_now(TABLE)
    ids = ids_in_table(warehouse)
    # Durable but unacknowledged batches are re-sent on the new stream: at-least-once, never lost.
    # Exactly the two withheld batches come twice (from the first stream's WAL and the re-send).
    assert sorted(ids) == [0, 1, 1, 2, 2]


@pytest.mark.parametrize(
    ("schema", "cause"),
    [
        (SCHEMA.append(pa.field("extra", pa.string())), "FIELD_NOT_IN_TABLE"),
        (pa.schema([pa.field("name", pa.string())]), "MISSING_REQUIRED_COLUMN"),
        (
            pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.int32())]),
            "TYPE_INCOMPATIBLE",
        ),
    ],
)
def test_schema_mismatch_is_rejected_and_nothing_written(
    emulator: Emulator, warehouse: Path, schema: pa.Schema, cause: str
) -> None:
    with pytest.raises(NonRetriableException, match=f"SCHEMA_VALIDATION_FAILED.*{cause}"):
        open_arrow(emulator, TABLE, schema)
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


def test_case_only_duplicate_columns_are_rejected_and_nothing_written(
    emulator: Emulator, warehouse: Path
) -> None:
    # Column names are case-insensitive: `id` and `ID` both land on `id`, one would overwrite the other.
    clash = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ID", pa.int64())])
    with pytest.raises(
        NonRetriableException,
        match=r"SCHEMA_VALIDATION_FAILED.*FIELD_COUNT_MISMATCH: main\.default\.events\.id: .*'id' and 'ID'.*send",
    ):
        open_arrow(emulator, TABLE, clash)
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


def test_broken_wal_ends_the_stream_and_refuses_new_ones_with_unavailable(
    emulator: Emulator, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = open_arrow(emulator, TABLE, SCHEMA, recovery_retries=1)
    stream.wait_for_offset(stream.ingest_batch(events([1])))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(wal_module.os, "fsync", failing_fsync)
    stream.ingest_batch(events([2]))
    # Not "Flush timed out" after a reconnect loop: the SDK's reopen is refused, and says why.
    with pytest.raises(ZerobusException, match=r"write-ahead log .* is broken"):
        stream.flush()
    monkeypatch.undo()  # the disk is back, but an fsync'd-or-not record can never be trusted again
    broken = r"unavailable.*main\.default\.events: the emulator's write-ahead log .* is broken.*restart the emulator"
    with pytest.raises(ZerobusException, match=broken) as info:
        open_arrow(emulator, TABLE, SCHEMA, recovery_retries=1)
    assert not isinstance(info.value, NonRetriableException)  # the service, not the request, is at fault
    with pytest.raises(ZerobusException, match=broken):
        open_json(emulator, TABLE, recovery_retries=1)
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == [1]  # only what was acknowledged before the failure


def test_missing_table_is_not_found(emulator: Emulator) -> None:
    with pytest.raises(NonRetriableException, match=r"not found.*main\.default\.missing does not exist"):
        open_arrow(emulator, "main.default.missing", SCHEMA)


def test_wrong_client_secret_is_rejected_by_the_token_endpoint(emulator: Emulator) -> None:
    with pytest.raises(NonRetriableException, match="401"):
        sdk_for(emulator).create_arrow_stream(
            TABLE, SCHEMA, emulator.client_id, "not-the-secret", arrow_options()
        )


def test_concurrent_stream_limit_answers_resource_exhausted(warehouse: Path) -> None:
    config = EmulatorConfig(time_to_table_s=0.2, max_streams_per_table=2)
    with Emulator(str(warehouse), config, iceberg=False) as emu:
        first, second = open_arrow(emu, TABLE, SCHEMA), open_arrow(emu, TABLE, SCHEMA)
        assert emu.open_streams(TABLE) == 2
        with pytest.raises(ZerobusException, match="resource has been exhausted") as info:
            open_arrow(emu, TABLE, SCHEMA, recovery_retries=1)
        assert not isinstance(info.value, NonRetriableException)  # retryable: back off, reuse a stream
        first.close()
        third = open_arrow(emu, TABLE, SCHEMA)  # a slot is free again
        third.close()
        second.close()


def test_second_table_is_independent(emulator: Emulator, warehouse: Path) -> None:
    create_table(warehouse, "main.other.t2")
    stream = open_arrow(emulator, "main.other.t2", SCHEMA)
    stream.wait_for_offset(stream.ingest_batch(events([42])))
    stream.close()
    emulator.materialize_now("main.other.t2")
    assert ids_in_table(warehouse) == []
    assert read_table(warehouse, "main.other.t2").column("id").to_pylist() == [42]


def test_many_concurrent_streams_on_one_table(emulator: Emulator, warehouse: Path) -> None:
    streams = [open_arrow(emulator, TABLE, SCHEMA) for _ in range(16)]
    assert emulator.open_streams(TABLE) == 16
    errors: list[BaseException] = []

    def send(k: int) -> None:
        try:
            stream = streams[k]
            for j in range(5):
                stream.ingest_batch(events([k * 100 + j]))
            stream.flush()
            stream.close()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == sorted(k * 100 + j for k in range(16) for j in range(5))
