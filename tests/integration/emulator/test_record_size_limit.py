"""The row path's 10 MiB message limit, the service's: over it the stream is refused, nothing is acked.

The official SDK refuses a call over 10,420,224 record bytes before sending (so an over-limit record
reaches the service only from another client, or a Rust SDK configured with a larger
``max_ingest_payload_bytes``); the emulator used to acknowledge records of 11 and 30 MiB. A raw grpcio
client sends them here, and the SDK's own largest call is still accepted.
"""

from __future__ import annotations

import json
import queue
from typing import Any

import grpc
import pytest
from zerobus.sdk.shared import TableProperties

from tests.integration.emulator.test_wire import channel, metadata, requests_from
from tests.support.emulator_helpers import TABLE, read_table, row_options, sdk_for
from zerobus_orchestration.emulator.proto import zerobus_service_pb2
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration

zb: Any = zerobus_service_pb2
MIB = 1024 * 1024
SDK_CALL_LIMIT = 10_420_224  # the SDK's max_ingest_payload_bytes (10 MiB - 64 KiB)


def _record(nbytes: int, row_id: int) -> str:
    """A JSON record of exactly ``nbytes`` bytes."""
    shell = json.dumps({"id": row_id, "name": ""})
    return json.dumps({"id": row_id, "name": "x" * (nbytes - len(shell))})


@pytest.mark.parametrize("mib", [11, 30])
def test_a_record_over_10_mib_is_refused_and_nothing_is_acknowledged(emulator: Emulator, mib: int) -> None:
    with channel(emulator) as ch:
        call = ch.stream_stream(
            "/databricks.zerobus.Zerobus/EphemeralStream",
            request_serializer=zb.EphemeralStreamRequest.SerializeToString,
            response_deserializer=zb.EphemeralStreamResponse.FromString,
        )
        q: queue.Queue[Any] = queue.Queue()
        responses = call(requests_from(q), metadata=metadata(emulator), timeout=30)
        q.put(
            zb.EphemeralStreamRequest(
                create_stream=zb.CreateIngestStreamRequest(table_name=TABLE, record_type=zb.JSON)
            )
        )
        assert next(responses).create_stream_response.stream_id
        small = zb.IngestRecordRequest(offset_id=0, json_record=_record(100, 1))
        big = zb.IngestRecordRequest(offset_id=1, json_record=_record(mib * MIB, 2))
        q.put(zb.EphemeralStreamRequest(ingest_record=small))
        q.put(zb.EphemeralStreamRequest(ingest_record=big))
        acks = []
        with pytest.raises(grpc.RpcError) as info:
            for response in responses:
                acks.append(response.ingest_record_response.durability_ack_up_to_offset)
        q.put(None)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # non-retriable: no reconnect loop
    assert "exceeds the service's limit of 10,485,760 bytes (10 MiB)" in str(info.value.details())
    assert TABLE in str(info.value.details())
    assert 1 not in acks, "the over-limit record was acknowledged"
    emulator.materialize_now(TABLE)
    ids = read_table(emulator.warehouse).column("id").to_pylist()
    assert 2 not in ids, "the over-limit record was written"
    assert ids == [1] if acks == [0] else ids in ([], [1])  # the small one, if acked, is in the table


def test_the_sdks_largest_call_is_accepted(emulator: Emulator) -> None:
    """Not stricter than the service: 10,420,224 record bytes in one call (the SDK's own limit) land."""
    stream = sdk_for(emulator).create_stream(
        emulator.client_id, emulator.client_secret, TableProperties(TABLE), row_options()
    )
    records = [_record(SDK_CALL_LIMIT // 2, 1), _record(SDK_CALL_LIMIT - SDK_CALL_LIMIT // 2, 2)]
    assert sum(len(r) for r in records) == SDK_CALL_LIMIT
    stream.wait_for_offset(stream.ingest_records_offset(records))
    stream.close()
    emulator.materialize_now(TABLE)
    assert sorted(read_table(emulator.warehouse).column("id").to_pylist()) == [1, 2]
