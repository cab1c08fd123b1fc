"""Shared pieces of the integration tests: test-sized SDK and pool settings, emulator, Delta read-back."""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
from deltalake import DeltaTable
from pydantic import SecretStr

from zerobus_orchestration.config import EmulatorConfig, PoolConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.sink import StreamPool
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import FAULT_TEST_SDK_OPTIONS
from zerobus_orchestration.transport.sdk import SdkTransport

TABLE = "main.default.events"
PoolFactory = Callable[..., StreamPool]  # the ``make_pool`` fixture
FAST_SDK = FAULT_TEST_SDK_OPTIONS
FAST_POOL = PoolConfig(
    min_streams=2,
    healthy_member_wait_s=10,
    rebuild_budget_s=10,
    open_backoff_initial_s=0.05,
    open_backoff_max_s=0.2,
)


def start_emulator(warehouse: str, **config: object) -> Emulator:
    """A started emulator whose materialiser never runs on its own: tests commit with ``delta_rows``."""
    cfg = EmulatorConfig(time_to_table_s=60.0, iceberg_lag_s=0.0, **config)  # type: ignore[arg-type]
    return Emulator(warehouse, cfg, iceberg=False).start()


def sdk_transport(emu: Emulator) -> SdkTransport:
    return SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(emu.client_secret),
        options=FAST_SDK,
    )


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


def delta_rows(emu: Emulator, table: str = TABLE) -> pa.Table:
    """Everything acknowledged, committed to Delta now, read back."""
    emu.materialize_now(table)
    return DeltaTable(table_uri(emu.warehouse, table)).to_pyarrow_table()
