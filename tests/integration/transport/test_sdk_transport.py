"""``SdkTransport`` / ``SdkStream``: the official SDK's Arrow streams against the local emulator.

Nothing is mocked: a real ``Emulator`` on a ``tmp_path`` warehouse, real Delta tables, the official
``databricks-zerobus-ingest-sdk`` over plaintext HTTP/2, faults and quotas from the emulator's own APIs.
SDK timeouts are test-sized through ``SdkStreamOptions``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pydantic import SecretStr
from zerobus.sdk.shared import HeadersProvider

from zerobus_orchestration.config import EmulatorConfig, SdkStreamOptions, ZerobusConfig
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    ConfigError,
    ErrorClass,
    FatalTransportError,
    SchemaRejectedError,
    StreamPoisonedError,
    TransientError,
)
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import FAULT_TEST_SDK_OPTIONS
from zerobus_orchestration.transport.base import Stream, Transport
from zerobus_orchestration.transport.classify import classify
from zerobus_orchestration.transport.sdk import SdkTransport, bypass_proxy_for_loopback

pytestmark = pytest.mark.integration

# In the Arrow types the wire carries (docs/architecture.md#the-wire-contract); the table created
# from it has STRING ``name``.
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("score", pa.float64()),
    ]
)
FAST = FAULT_TEST_SDK_OPTIONS
NAME_A = pa.array(["a"], pa.large_string())


def rows(start: int, count: int = 3) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.record_batch(
        {"id": ids, "name": [f"n{i}" for i in ids], "score": [i / 2 for i in ids]}, schema=SCHEMA
    )


def ids_of(batches: list[pa.RecordBatch]) -> list[int]:
    return [i for b in batches for i in b.column("id").to_pylist()]


def delta_ids(emulator: Emulator, table: str) -> list[int]:
    emulator.materialize_now(table)
    uri = table_uri(emulator.warehouse, table)
    return sorted(DeltaTable(uri).to_pyarrow_table().column("id").to_pylist())


def create_table(warehouse: Path, table: str) -> str:
    uri = table_uri(str(warehouse), table)
    os.makedirs(uri)
    DeltaTable.create(uri, schema=SCHEMA)
    return table


def start_emulator(warehouse: Path, **config: object) -> Emulator:
    # A long materialiser period: the tests decide when acknowledged data reaches Delta.
    cfg = EmulatorConfig(time_to_table_s=60.0, iceberg_lag_s=0.0, **config)  # type: ignore[arg-type]
    return Emulator(str(warehouse), cfg, iceberg=False).start()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def emulator(warehouse: Path) -> Iterator[Emulator]:
    """One emulator for the module; every test writes its own table, so faults never cross tests."""
    emu = start_emulator(warehouse)
    yield emu
    emu.stop()


_table_numbers = itertools.count()


@pytest.fixture
def table(warehouse: Path) -> str:
    return create_table(warehouse, f"main.default.events_{next(_table_numbers)}")


def transport_for(
    emu: Emulator, *, secret: str | None = None, options: SdkStreamOptions = FAST
) -> SdkTransport:
    return SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(secret if secret is not None else emu.client_secret),
        options=options,
    )


@pytest.fixture(scope="module")
def transport(emulator: Emulator) -> Iterator[SdkTransport]:
    transport = transport_for(emulator)
    yield transport
    transport.close()


class BearerHeaders(HeadersProvider):  # type: ignore[misc]
    """Caller-owned auth: a fixed bearer token, no OAuth round trip."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def get_headers(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self._token}")]


# -- happy path -------------------------------------------------------------------------------------


def test_implements_the_protocols(transport: SdkTransport, table: str) -> None:
    assert isinstance(transport, Transport)
    stream = transport.open_stream(table, SCHEMA)
    try:
        assert isinstance(stream, Stream)
        assert stream.table == table
        assert stream.stream_id
    finally:
        stream.close()


def test_submit_wait_flush_close_lands_every_row(
    emulator: Emulator, transport: SdkTransport, table: str
) -> None:
    stream = transport.open_stream(table, SCHEMA)
    batches = [rows(10 * i) for i in range(5)]
    offsets = [stream.submit(b) for b in batches]
    assert offsets == [0, 1, 2, 3, 4]  # one logical offset per batch, per stream

    stream.wait_for_offset(offsets[-1])
    # Cumulative: waiting for the last offset made every earlier one durable, so all of it commits.
    assert delta_ids(emulator, table) == sorted(ids_of(batches))

    more = rows(100)
    assert stream.submit(more) == 5
    stream.flush()
    stream.close()
    stream.close()  # idempotent
    assert stream.unacked() == []
    assert delta_ids(emulator, table) == sorted(ids_of([*batches, more]))


def test_offsets_are_per_stream(transport: SdkTransport, table: str) -> None:
    first, second = transport.open_stream(table, SCHEMA), transport.open_stream(table, SCHEMA)
    try:
        assert [first.submit(rows(0)), first.submit(rows(3))] == [0, 1]
        assert second.submit(rows(6)) == 0
        assert first.stream_id != second.stream_id
    finally:
        first.close()
        second.close()


def test_from_config_embedded_uses_the_emulator_credentials(
    warehouse: Path, emulator: Emulator, table: str
) -> None:
    cfg = ZerobusConfig(warehouse=str(warehouse), sdk=FAST)
    transport = SdkTransport.from_config(cfg, endpoint=emulator.endpoint, token_url=emulator.workspace_url)
    assert transport.endpoint == emulator.endpoint
    stream = transport.open_stream(table, SCHEMA)
    stream.submit(rows(0))
    stream.close()
    assert delta_ids(emulator, table) == [0, 1, 2]


def test_headers_provider_auth(emulator: Emulator, table: str) -> None:
    transport = SdkTransport(
        emulator.endpoint, "", headers_provider=BearerHeaders(emulator.issue_token(table)), options=FAST
    )
    stream = transport.open_stream(table, SCHEMA)
    stream.submit(rows(7))
    stream.close()
    assert delta_ids(emulator, table) == [7, 8, 9]


def test_retryable_abort_is_recovered_inside_the_sdk(
    emulator: Emulator, transport: SdkTransport, table: str
) -> None:
    """UNAVAILABLE mid-stream: the SDK reconnects and replays; the caller sees no error (at-least-once)."""
    emulator.faults.add(FaultSpec(kind=FaultKind.ABORT, table=table, after_batches=2, status="UNAVAILABLE"))
    stream = transport.open_stream(table, SCHEMA)
    batches = [rows(10 * i) for i in range(6)]
    for b in batches:
        stream.submit(b)
    stream.flush()
    stream.close()
    assert any(f.table == table for f in emulator.faults.acted), "the abort fault never acted"
    assert set(delta_ids(emulator, table)) == set(ids_of(batches))


# -- poison and unacked -----------------------------------------------------------------------------


def test_poison_reports_unacked_batches(emulator: Emulator, transport: SdkTransport, table: str) -> None:
    """A non-retryable status mid-stream: acknowledged batches stay durable, the rest come back."""
    emulator.faults.add(
        FaultSpec(
            kind=FaultKind.ABORT, table=table, after_batches=2, status="INVALID_ARGUMENT", message="poison"
        )
    )
    stream = transport.open_stream(table, SCHEMA)
    acked = [rows(0), rows(3)]
    for b in acked:
        stream.submit(b)
    stream.wait_for_offset(1)

    sent_after = [rows(100)]
    stream.submit(sent_after[0])  # the emulator aborts the stream on this one
    with pytest.raises(StreamPoisonedError) as poisoned:
        stream.wait_for_offset(2)
    aborts = [a for a in emulator.faults.actions_of(FaultKind.ABORT) if a.table == table]
    assert [a.spec.status for a in aborts] == ["INVALID_ARGUMENT"], "the abort fault never acted"
    assert poisoned.value.code == "INVALID_ARGUMENT"
    assert classify(poisoned.value) is ErrorClass.POISON
    assert "poison" in str(poisoned.value)
    stream.wait_for_offset(1)  # still reported durable by the dead stream: the ack lane salvages it

    with pytest.raises(StreamPoisonedError):
        stream.submit(rows(200))  # a dead stream takes nothing more
    with pytest.raises(StreamPoisonedError):
        stream.flush()

    unacked = stream.unacked()
    assert ids_of(unacked) == ids_of(sent_after)
    assert unacked[0].schema.equals(SCHEMA)
    assert delta_ids(emulator, table) == sorted(ids_of(acked))
    stream.close()  # idempotent after the failure


def test_ack_timeout_is_transient_and_the_wait_can_be_retried(
    emulator: Emulator, transport: SdkTransport, table: str
) -> None:
    emulator.faults.add(FaultSpec(kind=FaultKind.DELAY_ACKS, table=table, after_batches=0, delay_s=1.5))
    short_wait = transport_for(emulator, options=FAST.model_copy(update={"flush_timeout_ms": 500}))
    stream = short_wait.open_stream(table, SCHEMA)
    offset = stream.submit(rows(0))
    with pytest.raises(TransientError) as slow:
        stream.wait_for_offset(offset)
    assert slow.value.code == "DEADLINE_EXCEEDED"
    delayed = [a.detail for a in emulator.faults.actions_of(FaultKind.DELAY_ACKS) if a.table == table]
    assert delayed == ["delayed the ack of batch 1 by 1.5 s"], "the delay fault never acted"
    deadline = time.monotonic() + 5
    while True:  # what the ack lane does: retry the same wait, nothing re-sent, nothing re-advanced
        try:
            stream.wait_for_offset(offset)
            break
        except TransientError:
            assert time.monotonic() < deadline, "the delayed acknowledgement never arrived"
    stream.close()
    assert stream.unacked() == []


# -- error classification at open -----------------------------------------------------------------


def test_missing_table_is_fatal(transport: SdkTransport) -> None:
    with pytest.raises(FatalTransportError) as missing:
        transport.open_stream("main.default.nope", SCHEMA)
    assert missing.value.code == "NOT_FOUND"
    assert "main.default.nope" in str(missing.value)


def test_wrong_client_secret_is_fatal(emulator: Emulator, table: str) -> None:
    with pytest.raises(FatalTransportError) as refused:
        transport_for(emulator, secret="not-the-secret").open_stream(table, SCHEMA)
    assert refused.value.code == "UNAUTHENTICATED"
    assert "client_secret" in str(refused.value)  # says what to fix
    assert "not-the-secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("token_for", "code"),
    [(None, "UNAUTHENTICATED"), ("main.default.other", "PERMISSION_DENIED")],
    ids=["unknown-token", "token-for-another-table"],
)
def test_rejected_bearer_token_is_fatal(
    emulator: Emulator, table: str, token_for: str | None, code: str
) -> None:
    token = "bogus" if token_for is None else emulator.issue_token(token_for)
    transport = SdkTransport(emulator.endpoint, "", headers_provider=BearerHeaders(token), options=FAST)
    with pytest.raises(FatalTransportError) as rejected:
        transport.open_stream(table, SCHEMA)
    assert rejected.value.code == code


@pytest.mark.parametrize(
    ("schema", "causes"),
    [
        (
            pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("extra", pa.string())]),
            {"FIELD_NOT_IN_TABLE"},
        ),
        (pa.schema([pa.field("name", pa.large_string())]), {"MISSING_REQUIRED_COLUMN"}),
        (
            pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.int32())]),
            {"TYPE_INCOMPATIBLE"},
        ),
        (
            pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("bogus", pa.int8())]),
            {"TYPE_INCOMPATIBLE", "FIELD_NOT_IN_TABLE"},
        ),
    ],
    ids=["extra-column", "missing-required", "incompatible-type", "two-causes"],
)
def test_schema_mismatch_is_rejected_with_causes(
    transport: SdkTransport, table: str, schema: pa.Schema, causes: set[str]
) -> None:
    with pytest.raises(SchemaRejectedError) as rejected:
        transport.open_stream(table, schema)
    assert set(rejected.value.causes) == causes
    assert rejected.value.code == "INVALID_ARGUMENT"
    assert table in str(rejected.value)


def test_concurrency_limit_is_a_concurrency_reject(tmp_path: Path) -> None:
    table = create_table(tmp_path, "main.default.limited")
    emulator = start_emulator(tmp_path, max_streams_per_table=1)
    try:
        transport = transport_for(emulator)
        first = transport.open_stream(table, SCHEMA)
        with pytest.raises(ConcurrencyRejectedError) as refused:
            transport.open_stream(table, SCHEMA)
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        first.submit(rows(0))  # the open stream is unaffected by the refusal
        first.close()
        deadline = time.monotonic() + 5
        while emulator.open_streams(table):  # the server releases the slot when the call ends
            assert time.monotonic() < deadline
            time.sleep(0.01)
        transport.open_stream(table, SCHEMA).close()
        assert delta_ids(emulator, table) == [0, 1, 2]
    finally:
        emulator.stop()


def test_rejected_open_is_injectable(emulator: Emulator, transport: SdkTransport, table: str) -> None:
    emulator.faults.add(
        FaultSpec(kind=FaultKind.REJECT_OPEN, table=table, status="RESOURCE_EXHAUSTED", streams=2)
    )
    with pytest.raises(ConcurrencyRejectedError):
        transport.open_stream(table, SCHEMA)  # the SDK's two attempts spend both
    refused = [a.detail for a in emulator.faults.actions_of(FaultKind.REJECT_OPEN) if a.table == table]
    assert refused == ["refused the stream open with RESOURCE_EXHAUSTED"] * 2
    transport.open_stream(table, SCHEMA).close()


# -- batch schema at submit -------------------------------------------------------------------------


def test_metadata_only_differences_are_relabelled(
    emulator: Emulator, transport: SdkTransport, table: str
) -> None:
    """The SDK refuses any schema not identical to the stream's; pandas-style metadata must not."""
    stream = transport.open_stream(table, SCHEMA)
    tagged = rows(0).replace_schema_metadata({"pandas": '{"index_columns": []}'})
    relaxed = pa.record_batch(
        rows(3).columns, schema=pa.schema([f.with_nullable(True) for f in SCHEMA])
    )  # nullable flag differs, no nulls: same data
    assert stream.submit(tagged) == 0
    assert stream.submit(relaxed) == 1
    stream.close()
    assert delta_ids(emulator, table) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("batch", "cause", "named"),
    [
        (pa.record_batch({"id": [1], "name": NAME_A}), "MISSING_REQUIRED_COLUMN", "score"),
        (
            pa.record_batch({"id": [1], "name": NAME_A, "score": [1.0], "x": [1]}),
            "FIELD_NOT_IN_TABLE",
            "x",
        ),
        (
            pa.record_batch({"id": [1], "name": pa.array(["a"], pa.string()), "score": [1.0]}),
            "TYPE_INCOMPATIBLE",
            "name",
        ),
        (pa.record_batch({"score": [1.0], "id": [1], "name": NAME_A}), "FIELD_OUT_OF_ORDER", "score"),
        (
            pa.record_batch(
                [pa.array([None], pa.int64()), NAME_A, pa.array([1.0])],
                names=["id", "name", "score"],
            ),
            "NULL_IN_REQUIRED_COLUMN",
            "id",
        ),
    ],
    ids=["missing-column", "extra-column", "other-type", "other-order", "null-in-not-null"],
)
def test_mismatched_batch_is_rejected_before_sending(
    emulator: Emulator, transport: SdkTransport, table: str, batch: pa.RecordBatch, cause: str, named: str
) -> None:
    stream = transport.open_stream(table, SCHEMA)
    with pytest.raises(SchemaRejectedError) as rejected:
        stream.submit(batch)
    assert rejected.value.causes == (cause,)
    assert classify(rejected.value) is ErrorClass.SCHEMA_REJECTED  # the pool must not rebuild on it
    message = str(rejected.value)
    assert table in message and named in message and "fix:" in message
    assert stream.submit(rows(0)) == 0  # nothing was sent; the stream is still usable
    stream.close()
    assert delta_ids(emulator, table) == [0, 1, 2]


# -- configuration ----------------------------------------------------------------------------------


def test_configuration_errors_are_named() -> None:
    with pytest.raises(ConfigError, match="client_id and client_secret"):
        SdkTransport("http://127.0.0.1:1", "http://127.0.0.1:2")
    with pytest.raises(ConfigError, match="needs a scheme"):
        SdkTransport("127.0.0.1:1", "http://127.0.0.1:2", client_id="a", client_secret=SecretStr("b"))
    with pytest.raises(ConfigError, match="endpoint"):
        SdkTransport.from_config(ZerobusConfig())


def test_loopback_endpoints_bypass_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        monkeypatch.setenv(var, "internal.example")
    bypass_proxy_for_loopback("https://1234.zerobus.us-west-2.cloud.databricks.com")
    assert os.environ["NO_PROXY"] == "internal.example"  # remote endpoints keep the proxy
    bypass_proxy_for_loopback("http://[::1]:4444")
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        assert os.environ[var].split(",") == ["internal.example", "127.0.0.1", "localhost", "::1"]
    bypass_proxy_for_loopback("http://localhost:1")  # idempotent
    assert os.environ["NO_PROXY"].count("localhost") == 1


def test_every_stream_option_reaches_the_sdk() -> None:
    """Each SdkStreamOptions field is handed to the SDK's ArrowStreamConfigurationOptions, none dropped."""
    from zerobus import IPCCompression

    from zerobus_orchestration.config import SdkStreamOptions
    from zerobus_orchestration.transport.sdk import arrow_stream_options

    ours = SdkStreamOptions(
        recovery=False,
        recovery_timeout_ms=1_111,
        recovery_backoff_ms=222,
        recovery_retries=3,
        server_lack_of_ack_timeout_ms=4_444,
        flush_timeout_ms=5_555,
        connection_timeout_ms=6_666,
        max_inflight_batches=77,
        ipc_compression="zstd",
        stream_paused_max_wait_time_ms=888,
    )
    theirs = arrow_stream_options(ours)
    for name, value in ours.model_dump().items():
        expected = IPCCompression.ZSTD if name == "ipc_compression" else value
        assert getattr(theirs, name) == expected, name
