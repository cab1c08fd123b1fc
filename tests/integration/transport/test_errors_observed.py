"""``classify`` on exceptions the official SDK 1.10.0 really raised against the emulator (not hand-made).

Each row provokes one failure through the SDK, catches what it raises and pins its class. The messages
observed (they live in the SDK's Rust core, so a new SDK version may change them):

| scenario | SDK exception and message (abridged) | class |
|---|---|---|
| bogus bearer token | NonRetriable "Failed to create stream: code: 'The request does not have valid authentication credentials', message: \"c.s.t: unknown bearer token\"" | FATAL |
| token for another table | NonRetriable "... code: 'The caller does not have permission to execute the specified operation' ..." | FATAL |
| wrong client secret | NonRetriable "Specified UC token is in invalid format: Client error (401): {...invalid_client...}" | FATAL |
| token endpoint not listening | ZerobusException "Token fetch failed: Network error: error sending request for url (...)" | TRANSIENT |
| table missing | NonRetriable "Failed to create stream: code: 'Some requested entity was not found', ..." | FATAL |
| Arrow schema mismatch at open | NonRetriable "... code: 'Client specified an invalid argument', message: \"SCHEMA_VALIDATION_FAILED: ...\"" | SCHEMA_REJECTED |
| unknown JSON field mid-stream | NonRetriable "Invalid argument: SCHEMA_VALIDATION_FAILED: FIELD_NOT_IN_TABLE: ..." | SCHEMA_REJECTED |
| RESOURCE_EXHAUSTED at open | ZerobusException "Failed to create stream: code: 'Some resource has been exhausted', ..." | CONCURRENCY_REJECT |
| INVALID_ARGUMENT mid-stream | NonRetriable "Stream is closed: code: 'Client specified an invalid argument', message: \"...\"" | POISON |
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from zerobus.sdk.shared import TableProperties
from zerobus.sdk.sync import ZerobusSdk

from tests.support.emulator_helpers import (
    SCHEMA,
    TABLE,
    arrow_options,
    create_table,
    events,
    open_arrow,
    open_json,
    row_options,
    sdk_for,
    token_headers,
)
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.transport.classify import classify

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    warehouse = tmp_path_factory.mktemp("observed")
    create_table(warehouse)
    config = EmulatorConfig(time_to_table_s=0.2, max_streams_per_table=1)
    with Emulator(str(warehouse), config, iceberg=False) as emulator:
        yield emulator


def bogus_token(emu: Emulator) -> None:
    sdk_for(emu).create_stream(
        table_properties=TableProperties(TABLE),
        options=row_options(),
        headers_provider=token_headers(TABLE, "x"),
    )


def other_table_token(emu: Emulator) -> None:
    headers = token_headers(TABLE, emu.issue_token("main.default.other"))
    sdk_for(emu).create_arrow_stream_with_headers_provider(TABLE, SCHEMA, headers, arrow_options())


def wrong_secret(emu: Emulator) -> None:
    sdk_for(emu).create_arrow_stream(TABLE, SCHEMA, emu.client_id, "wrong", arrow_options())


def token_endpoint_down(emu: Emulator) -> None:
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ZerobusSdk(emu.endpoint, f"http://127.0.0.1:{port}").create_arrow_stream(
        TABLE, SCHEMA, emu.client_id, emu.client_secret, arrow_options()
    )


def table_missing(emu: Emulator) -> None:
    open_arrow(emu, "main.default.missing", SCHEMA)


def arrow_schema_mismatch(emu: Emulator) -> None:
    open_arrow(emu, TABLE, SCHEMA.append(pa.field("extra", pa.string())))


def json_unknown_field(emu: Emulator) -> None:
    stream = open_json(emu, TABLE)
    stream.ingest_record_offset({"id": 1, "extra": 2})
    stream.flush()


def resource_exhausted_at_open(emu: Emulator) -> None:
    held = open_arrow(emu, TABLE, SCHEMA)  # the limit is one stream per table
    try:
        open_arrow(emu, TABLE, SCHEMA, recovery_retries=0)
    finally:
        held.close()


def poison_mid_stream(emu: Emulator) -> None:
    emu.faults.add(FaultSpec(kind=FaultKind.ABORT, after_batches=1, status="INVALID_ARGUMENT", message="bad"))
    stream = open_arrow(emu, TABLE, SCHEMA)
    for i in range(3):
        stream.ingest_batch(events([i]))
    try:
        stream.flush()
    finally:  # the exception classified below came from the fault, not from something else
        assert [a.spec.status for a in emu.faults.actions_of(FaultKind.ABORT)] == ["INVALID_ARGUMENT"]


ROWS: list[tuple[Callable[[Emulator], None], ErrorClass]] = [
    (bogus_token, ErrorClass.FATAL),
    (other_table_token, ErrorClass.FATAL),
    (wrong_secret, ErrorClass.FATAL),
    (token_endpoint_down, ErrorClass.TRANSIENT),
    (table_missing, ErrorClass.FATAL),
    (arrow_schema_mismatch, ErrorClass.SCHEMA_REJECTED),
    (json_unknown_field, ErrorClass.SCHEMA_REJECTED),
    (resource_exhausted_at_open, ErrorClass.CONCURRENCY_REJECT),
    (poison_mid_stream, ErrorClass.POISON),
]


@pytest.mark.parametrize(("provoke", "expected"), ROWS, ids=[f.__name__ for f, _ in ROWS])
def test_classify_real_sdk_exception(
    emu: Emulator, provoke: Callable[[Emulator], None], expected: ErrorClass
) -> None:
    with pytest.raises(Exception) as info:
        provoke(emu)
    assert type(info.value).__module__.startswith(("zerobus", "_zerobus_core")), repr(info.value)
    assert classify(info.value) is expected, str(info.value)
