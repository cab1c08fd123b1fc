"""The official SDK's row path (``EphemeralStream``: JSON and protobuf) against the emulator.

SDK 1.10.0 messages observed here:
* bad / missing / expired bearer token: ``NonRetriableException("Failed to create stream: code: 'The
  request does not have valid authentication credentials', message: \"c.s.t: unknown bearer token\"")``
  (tried twice: the SDK invalidates its headers once on UNAUTHENTICATED).
* token scoped to another table: ``NonRetriableException("... code: 'The caller does not have permission
  to execute the specified operation', ...")``.
* unknown JSON field: ``NonRetriableException("Invalid argument: SCHEMA_VALIDATION_FAILED:
  FIELD_NOT_IN_TABLE: ...")`` from ``flush``; the record comes back from ``get_unacked_records()``.
* poison mid-stream: ``NonRetriableException("Invalid argument: <details>.")``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from zerobus.sdk.shared import NonRetriableException, TableProperties

from tests.support.emulator_helpers import (
    TABLE,
    open_json,
    read_table,
    row_options,
    sdk_for,
    token_headers,
    wait_for_streams_opened,
)
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration


def ids_in_table(warehouse: Path) -> list[int]:
    return sorted(read_table(warehouse).column("id").to_pylist())


def test_json_records_and_batches_acked_flushed_and_in_delta(emulator: Emulator, warehouse: Path) -> None:
    stream = open_json(emulator, TABLE)
    first = stream.ingest_record_offset({"id": 1, "name": "a", "score": 0.5})
    second = stream.ingest_record_offset(json.dumps({"id": 2}))
    batch = stream.ingest_records_offset([{"id": 3, "name": "c"}, {"id": 4, "score": 2.0}])
    assert (first, second, batch) == (0, 1, 2)  # a batch gets one offset
    stream.wait_for_offset(batch)
    stream.flush()
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).sort_by("id").to_pylist() == [
        {"id": 1, "name": "a", "score": 0.5},
        {"id": 2, "name": None, "score": None},
        {"id": 3, "name": "c", "score": None},
        {"id": 4, "name": None, "score": 2.0},
    ]


def test_protobuf_records_are_decoded_with_the_sent_descriptor(emulator: Emulator, warehouse: Path) -> None:
    file_proto = descriptor_pb2.FileDescriptorProto(name="event_test.proto", package="t", syntax="proto2")
    message = file_proto.message_type.add(name="Event")
    message.field.add(name="id", number=1, type=3, label=2)  # int64, required: the column is NOT NULL
    message.field.add(name="name", number=2, type=9, label=1)  # string
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    event_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Event"))
    stream = sdk_for(emulator).create_stream(
        emulator.client_id,
        emulator.client_secret,
        TableProperties(TABLE, event_cls.DESCRIPTOR),
        row_options(),
    )
    stream.ingest_record_offset(event_cls(id=10, name="p"))
    stream.wait_for_offset(stream.ingest_records_offset([event_cls(id=11), event_cls(id=12, name="q")]))
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).sort_by("id").select(["id", "name"]).to_pylist() == [
        {"id": 10, "name": "p"},
        {"id": 11, "name": None},
        {"id": 12, "name": "q"},
    ]


def test_unavailable_mid_stream_is_recovered(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(
        FaultSpec(kind=FaultKind.ABORT, protocol="row", after_batches=3, status="UNAVAILABLE")
    )
    stream = open_json(emulator, TABLE)
    for i in range(6):
        stream.ingest_record_offset({"id": i})
    stream.flush()
    stream.close()
    assert [a.detail for a in emulator.faults.actions_of(FaultKind.ABORT)] == [
        "ended the stream with UNAVAILABLE at batch 4"
    ], "the abort fault never acted"
    assert emulator.streams_opened(TABLE) == 2, "the SDK did not reconnect"
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == list(range(6))


def test_poison_mid_stream_returns_unacked_records(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(
        FaultSpec(kind=FaultKind.ABORT, after_batches=2, status="INVALID_ARGUMENT", message="poisoned")
    )
    stream = open_json(emulator, TABLE)
    for i in range(5):
        stream.ingest_record_offset({"id": i})
    with pytest.raises(NonRetriableException, match="poisoned"):
        stream.flush()
    assert [a.spec.status for a in emulator.faults.actions_of(FaultKind.ABORT)] == ["INVALID_ARGUMENT"]
    assert [json.loads(r)["id"] for r in stream.get_unacked_records()] == [2, 3, 4]
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == [0, 1]


def test_close_stream_signal_rotates(emulator: Emulator, warehouse: Path) -> None:
    emulator.faults.add(FaultSpec(kind=FaultKind.ROTATE, protocol="row", after_batches=2, grace_ms=1000))
    stream = open_json(emulator, TABLE)
    offsets = [stream.ingest_record_offset({"id": i}) for i in range(5)]
    stream.flush()
    assert [f.kind for f in emulator.faults.acted] == [FaultKind.ROTATE], "no rotation signal was sent"
    assert wait_for_streams_opened(emulator, TABLE, 2) == 2, "the SDK did not move to a new stream"
    offsets.append(stream.ingest_record_offset({"id": 5}))  # goes out on the rotated stream
    stream.wait_for_offset(offsets[-1])
    stream.close()
    assert offsets == list(range(6))
    assert emulator.streams_opened(TABLE) == 2
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == list(range(6))  # every record exactly once across both streams


def test_unknown_json_field_is_a_schema_rejection_and_nothing_is_written(
    emulator: Emulator, warehouse: Path
) -> None:
    stream = open_json(emulator, TABLE)
    stream.ingest_record_offset({"id": 1, "bogus": True})
    with pytest.raises(NonRetriableException, match=r"SCHEMA_VALIDATION_FAILED.*FIELD_NOT_IN_TABLE.*bogus"):
        stream.flush()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


def test_case_only_duplicate_json_fields_are_rejected_and_nothing_is_written(
    emulator: Emulator, warehouse: Path
) -> None:
    # Column names are case-insensitive: storing either value would silently drop the other.
    stream = open_json(emulator, TABLE)
    stream.ingest_record_offset({"id": 1, "ID": 9})
    with pytest.raises(
        NonRetriableException,
        match=r"SCHEMA_VALIDATION_FAILED.*FIELD_COUNT_MISMATCH: main\.default\.events\.id: .*'id' and 'ID'.*send",
    ):
        stream.flush()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


def test_a_json_record_repeating_a_key_is_rejected_and_nothing_is_written(
    emulator: Emulator, warehouse: Path
) -> None:
    # A plain JSON parser keeps the last value of a repeated key, silently losing the first.
    stream = open_json(emulator, TABLE)
    stream.ingest_record_offset('{"id": 1, "id": 9}')
    with pytest.raises(NonRetriableException, match=r"repeats the key 'id'"):
        stream.flush()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


def test_null_in_required_column_is_rejected(emulator: Emulator, warehouse: Path) -> None:
    stream = open_json(emulator, TABLE)
    stream.ingest_record_offset({"name": "no id"})
    with pytest.raises(NonRetriableException, match="MISSING_REQUIRED_COLUMN"):
        stream.flush()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).num_rows == 0


@pytest.mark.parametrize(
    ("token_kind", "message"),
    [
        ("missing", "valid authentication credentials"),
        ("bogus", "valid authentication credentials"),
        ("expired", "valid authentication credentials"),
        ("other_table", "does not have permission"),
    ],
)
def test_bad_tokens_are_rejected(emulator: Emulator, token_kind: str, message: str) -> None:
    token = {
        "missing": None,
        "bogus": "zbemu-not-issued",
        "expired": emulator.issue_token(TABLE, ttl_s=-1),
        "other_table": emulator.issue_token("main.default.other"),
    }[token_kind]
    with pytest.raises(NonRetriableException, match=message):
        sdk_for(emulator).create_stream(
            table_properties=TableProperties(TABLE),
            options=row_options(),
            headers_provider=token_headers(TABLE, token),
        )


def test_table_scoped_token_through_headers_provider_works(emulator: Emulator, warehouse: Path) -> None:
    stream = sdk_for(emulator).create_stream(
        table_properties=TableProperties(TABLE),
        options=row_options(),
        headers_provider=token_headers(TABLE, emulator.issue_token(TABLE)),
    )
    stream.wait_for_offset(stream.ingest_record_offset({"id": 5}))
    stream.close()
    emulator.materialize_now(TABLE)
    assert ids_in_table(warehouse) == [5]


def test_avro_records_are_decoded_with_the_sent_writer_schema(emulator: Emulator, warehouse: Path) -> None:
    import fastavro  # noqa: F401  # a test dependency: missing it must fail this test, not skip it

    avro_schema = json.dumps(
        {
            "type": "record",
            "name": "Event",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
        }
    )
    stream = sdk_for(emulator).create_stream(
        emulator.client_id,
        emulator.client_secret,
        TableProperties(TABLE, avro_schema=avro_schema),
        row_options(),
    )
    stream.ingest_record_offset({"id": 20, "name": "avro"})
    stream.wait_for_offset(stream.ingest_records_offset([{"id": 21, "name": None}]))
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).sort_by("id").select(["id", "name"]).to_pylist() == [
        {"id": 20, "name": "avro"},
        {"id": 21, "name": None},
    ]


def test_records_above_grpc_default_4_mib_are_accepted(emulator: Emulator, warehouse: Path) -> None:
    big = "x" * 6_000_000  # one 6 MB record: over grpcio's 4 MiB default, under the SDK's 10 MiB call limit
    stream = open_json(emulator, TABLE)
    stream.wait_for_offset(stream.ingest_record_offset({"id": 1, "name": big}))
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).column("name").to_pylist() == [big]
