"""Helpers for the emulator tests: target tables, and the official SDK with test-sized timeouts."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from zerobus import ArrowStreamConfigurationOptions, ZerobusSdk
from zerobus.sdk.shared import HeadersProvider, StreamConfigurationOptions, TableProperties

from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.tables import table_uri

TABLE = "main.default.events"
# The test table's schema in the Arrow types the wire carries (docs/architecture.md#the-wire-contract):
# what an SDK stream to it must declare. Created from it, the Delta table has STRING ``name``.
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("score", pa.float64()),
    ]
)


def create_table(warehouse: Path | str, name: str = TABLE, schema: pa.Schema = SCHEMA) -> str:
    uri = table_uri(str(warehouse), name)
    os.makedirs(uri, exist_ok=True)
    DeltaTable.create(uri, schema=schema)
    return uri


def read_table(warehouse: Path | str, name: str = TABLE) -> pa.Table:
    return DeltaTable(table_uri(str(warehouse), name)).to_pyarrow_table()


# The raw SDK's option classes, set up to fail within seconds (both stream kinds share these).
_FAST_RECOVERY: dict[str, Any] = dict(
    recovery=True,
    recovery_timeout_ms=3_000,
    recovery_backoff_ms=100,
    recovery_retries=2,
    server_lack_of_ack_timeout_ms=5_000,
    flush_timeout_ms=10_000,
)


def arrow_options(**overrides: Any) -> ArrowStreamConfigurationOptions:
    return ArrowStreamConfigurationOptions(**{**_FAST_RECOVERY, "connection_timeout_ms": 3_000, **overrides})


def row_options(**overrides: Any) -> StreamConfigurationOptions:
    return StreamConfigurationOptions(**{**_FAST_RECOVERY, **overrides})


def sdk_for(emu: Emulator) -> ZerobusSdk:
    return ZerobusSdk(emu.endpoint, emu.workspace_url)


class StaticHeaders(HeadersProvider):  # type: ignore[misc]
    def __init__(self, headers: list[tuple[str, str]]) -> None:
        super().__init__()
        self._headers = headers

    def get_headers(self) -> list[tuple[str, str]]:
        return list(self._headers)


def token_headers(table: str, token: str | None) -> StaticHeaders:
    headers = [("x-databricks-zerobus-table-name", table)]
    if token is not None:
        headers.append(("authorization", f"Bearer {token}"))
    return StaticHeaders(headers)


def open_arrow(emu: Emulator, table: str, schema: pa.Schema, **options: Any) -> Any:
    return sdk_for(emu).create_arrow_stream(
        table, schema, emu.client_id, emu.client_secret, arrow_options(**options)
    )


def open_json(emu: Emulator, table: str, **options: Any) -> Any:
    return sdk_for(emu).create_stream(
        emu.client_id, emu.client_secret, TableProperties(table), row_options(**options)
    )


def wait_for_streams_opened(emu: Emulator, table: str, count: int, timeout_s: float = 10.0) -> int:
    """Streams opened on ``table`` once ``count`` is reached, or whatever it is at the deadline.

    The SDK reconnects after a rotation signal asynchronously (after the grace or the in-flight acks),
    so a test must wait for the new stream before relying on it, never sleep a guessed time.
    """
    deadline = time.monotonic() + timeout_s
    while emu.streams_opened(table) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return emu.streams_opened(table)


def events(ids: list[int]) -> pa.RecordBatch:
    """A batch of the test table's full schema (the SDK requires batches to match the stream schema)."""
    return pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids], "score": [i / 2 for i in ids]},
        schema=SCHEMA,
    )
