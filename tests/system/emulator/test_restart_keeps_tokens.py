"""The official SDK writes through a SIGKILL and restart of the emulator process, on every stream kind.

SDK 1.10 re-sends its cached token (or its ``HeadersProvider``'s) when it reconnects, and a refused token
fails the stream for good. Tokens used to live in the emulator's memory, so after a restart JSON,
protobuf and Avro streams died with ``UNAUTHENTICATED`` (non-retriable) while the token was still
valid; the tokens are now signed with the warehouse's key and stay valid until they expire, as
Databricks' do. Every stream kind, sync and async, OAuth and ``HeadersProvider``, keeps writing on its
recovered connection, and every acknowledged row is in the Delta table afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import signal
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from zerobus import ArrowStreamConfigurationOptions
from zerobus.sdk import aio
from zerobus.sdk import sync as sdk_sync
from zerobus.sdk.shared import (
    NonRetriableException,
    StreamConfigurationOptions,
    TableProperties,
    ZerobusException,
)

from tests.support.emulator_helpers import TABLE, create_table, read_table, token_headers
from tests.support.emulator_process import emulator_process

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROWS = 40  # per stream and phase (before the kill, after the restart)
# The canonical wire schema of the table (STRING as large_utf8, as the SDK's own example declares).
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_utf8()),
        pa.field("score", pa.float64()),
    ]
)
AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"]},
            {"name": "score", "type": ["null", "double"]},
        ],
    }
)
# Long enough to outlast the restart (the SDK retries the dead endpoint until the successor serves).
RECOVERY: dict[str, Any] = dict(
    recovery=True,
    recovery_timeout_ms=5_000,
    recovery_backoff_ms=200,
    recovery_retries=150,
    server_lack_of_ack_timeout_ms=20_000,
    flush_timeout_ms=60_000,
)


def _event_class() -> Any:
    file_proto = descriptor_pb2.FileDescriptorProto(name="restart_event.proto", package="r", syntax="proto2")
    message = file_proto.message_type.add(name="Event")
    message.field.add(name="id", number=1, type=3, label=2)  # int64, required: id is NOT NULL
    message.field.add(name="name", number=2, type=9, label=1)  # string, optional
    message.field.add(name="score", number=3, type=1, label=1)  # double, optional
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("r.Event"))


Event = _event_class()


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "score": i / 2}


def _avro(i: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(AVRO_SCHEMA)), _row(i))
    return out.getvalue()


@dataclass
class Writer:
    """One stream of the test: how to send ``ids`` on it (returns the last offset) and to finish it."""

    name: str
    send: Callable[[list[int]], int]
    wait: Callable[[int], None]
    close: Callable[[], None]


class Endpoint:
    def __init__(self, info: dict[str, Any]) -> None:
        self.host = str(info["endpoint"])
        self.workspace = str(info["workspace_url"])
        self.client_id = str(info["client_id"])
        self.client_secret = str(info["client_secret"])  # the warehouse's own (both processes read it)
        self.loop = asyncio.new_event_loop()

    def token(self) -> str:
        """A workspace token from the first emulator process's token endpoint (client credentials)."""
        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        request = urllib.request.Request(
            self.workspace + "/oidc/v1/token",
            data=b"grant_type=client_credentials&scope=all-apis",
            headers={"Authorization": f"Basic {basic}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(json.loads(answer.read())["access_token"])

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


def _row_writer(ep: Endpoint, name: str, kind: str, asynchronous: bool, headers: bool) -> Writer:
    props = {
        "json": TableProperties(TABLE),
        "proto": TableProperties(TABLE, Event.DESCRIPTOR),
        "avro": TableProperties(TABLE, avro_schema=AVRO_SCHEMA),
    }[kind]
    encode: dict[str, Callable[[int], Any]] = {
        "json": lambda i: json.dumps(_row(i)),
        "proto": lambda i: Event(**_row(i)),
        "avro": _avro,
    }
    auth: dict[str, Any] = (
        {"headers_provider": token_headers(TABLE, ep.token())}
        if headers
        else {"client_id": ep.client_id, "client_secret": ep.client_secret}
    )
    options = StreamConfigurationOptions(**RECOVERY)
    if asynchronous:
        sdk = aio.ZerobusSdk(ep.host, ep.workspace)
        stream = ep.run(sdk.create_stream(table_properties=props, options=options, **auth))
        return Writer(
            name,
            lambda ids: int(ep.run(stream.ingest_records_offset([encode[kind](i) for i in ids]))),
            lambda offset: ep.run(stream.wait_for_offset(offset)),
            lambda: ep.run(stream.close()),
        )
    sync_stream = sdk_sync.ZerobusSdk(ep.host, ep.workspace).create_stream(
        table_properties=props, options=options, **auth
    )
    return Writer(
        name,
        lambda ids: int(sync_stream.ingest_records_offset([encode[kind](i) for i in ids])),
        sync_stream.wait_for_offset,
        sync_stream.close,
    )


def _arrow_writer(ep: Endpoint, name: str, asynchronous: bool, headers: bool) -> Writer:
    options = ArrowStreamConfigurationOptions(**RECOVERY, connection_timeout_ms=5_000)

    def batch(ids: list[int]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([_row(i) for i in ids], schema=ARROW_SCHEMA)

    sdk: Any = (aio if asynchronous else sdk_sync).ZerobusSdk(ep.host, ep.workspace)
    if headers:
        opened = sdk.create_arrow_stream_with_headers_provider(
            TABLE, ARROW_SCHEMA, token_headers(TABLE, ep.token()), options
        )
    else:
        opened = sdk.create_arrow_stream(TABLE, ARROW_SCHEMA, ep.client_id, ep.client_secret, options)
    if asynchronous:
        stream = ep.run(opened)
        return Writer(
            name,
            lambda ids: int(ep.run(stream.ingest_batch(batch(ids)))),
            lambda offset: ep.run(stream.wait_for_offset(offset)),
            lambda: ep.run(stream.close()),
        )
    return Writer(
        name, lambda ids: int(opened.ingest_batch(batch(ids))), opened.wait_for_offset, opened.close
    )


def _writers(ep: Endpoint) -> list[Writer]:
    return [
        _row_writer(ep, "json sync oauth", "json", asynchronous=False, headers=False),
        _row_writer(ep, "json async headers", "json", asynchronous=True, headers=True),
        _row_writer(ep, "proto sync headers", "proto", asynchronous=False, headers=True),
        _row_writer(ep, "proto async oauth", "proto", asynchronous=True, headers=False),
        _row_writer(ep, "avro sync oauth", "avro", asynchronous=False, headers=False),
        _arrow_writer(ep, "arrow sync oauth", asynchronous=False, headers=False),
        _arrow_writer(ep, "arrow async headers", asynchronous=True, headers=True),
    ]


def _ids(stream_no: int, phase: int) -> list[int]:
    base = stream_no * 1000 + phase * ROWS
    return list(range(base, base + ROWS))


def _ports(info: dict[str, Any]) -> tuple[str, str]:
    return str(info["endpoint"]).rsplit(":", 1)[1], str(info["workspace_url"]).rsplit(":", 1)[1]


def test_every_stream_kind_writes_through_a_sigkill_and_restart_with_no_acknowledged_row_lost(
    tmp_path: Path,
) -> None:
    warehouse = tmp_path / "warehouse"
    create_table(warehouse)
    args = ("--no-iceberg", "--time-to-table", "0.2")
    acked: set[int] = set()
    with emulator_process(warehouse, tmp_path, *args) as (first, info):
        ep = Endpoint(info)
        writers = _writers(ep)
        for n, writer in enumerate(writers):
            writer.wait(writer.send(_ids(n, 0)))  # acknowledged by the first process
            acked.update(_ids(n, 0))
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
    grpc_port, http_port = _ports(info)
    with emulator_process(warehouse, tmp_path, *args, "--port", grpc_port, "--token-port", http_port) as (
        second,
        restarted,
    ):
        assert restarted["endpoint"] == info["endpoint"], "the successor did not get the same port"
        assert restarted["pid"] != info["pid"]
        recovered: dict[str, str] = {}
        for n, writer in enumerate(writers):
            try:  # the same stream objects: each recovers onto the successor with the token it holds
                writer.wait(writer.send(_ids(n, 1)))
                writer.close()
                acked.update(_ids(n, 1))
            except ZerobusException as exc:  # the old emulator: "unknown bearer token", not retried
                recovered[writer.name] = str(exc)
        assert recovered == {}, f"streams failed after the restart: {recovered}"
        second.send_signal(signal.SIGTERM)  # a clean stop commits everything acknowledged
        assert second.wait(timeout=60) == 0
    ids = read_table(warehouse).column("id").to_pylist()
    missing = acked - set(ids)
    assert not missing, f"{len(missing)} acknowledged rows lost, e.g. {sorted(missing)[:5]}"
    assert set(ids) == acked  # at-least-once: re-sends may repeat a row, never invent one
    ep.loop.close()


def test_the_successor_accepts_the_issued_token_and_refuses_a_forged_one(tmp_path: Path) -> None:
    """What survives a restart is the key, not a list: a token with a wrong signature is refused."""
    warehouse = tmp_path / "warehouse"
    create_table(warehouse)
    with emulator_process(warehouse, tmp_path, "--no-iceberg") as (_, info):
        token = Endpoint(info).token()
    prefix, body, signature = token.split(".")
    forged = f"{prefix}.{body}.{signature[::-1]}"
    with emulator_process(warehouse, tmp_path, "--no-iceberg") as (_, info):
        sdk = sdk_sync.ZerobusSdk(info["endpoint"], info["workspace_url"])
        quick = StreamConfigurationOptions(recovery=True, recovery_retries=1, recovery_backoff_ms=50)
        good = sdk.create_stream(
            table_properties=TableProperties(TABLE),
            options=quick,
            headers_provider=token_headers(TABLE, token),
        )
        good.wait_for_offset(good.ingest_record_offset({"id": 1}))
        good.close()
        with pytest.raises(NonRetriableException, match="unknown bearer token"):
            sdk.create_stream(
                table_properties=TableProperties(TABLE),
                options=quick,
                headers_provider=token_headers(TABLE, forged),
            )
