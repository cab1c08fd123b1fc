"""Fixtures for the sink over the official SDK against the local emulator: real SDK, Delta, catalog.

Nothing is mocked. The emulator's materialiser never runs on its own here: each test forces the commit
(``integration_env.delta_rows``) and then reads the Delta table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.integration_env import FAST_POOL, TABLE, PoolFactory, sdk_transport, start_emulator
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool
from zerobus_orchestration.transport.base import Transport
from zerobus_orchestration.transport.sdk import SdkTransport


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture
def emulator(warehouse: Path) -> Iterator[Emulator]:
    emu = start_emulator(str(warehouse))
    yield emu
    emu.stop()


@pytest.fixture
def transport(emulator: Emulator) -> SdkTransport:
    return sdk_transport(emulator)


@pytest.fixture
def gate(warehouse: Path) -> CatalogGate:
    """The local catalog creates the target table from the first stamped batch, reserved columns too."""
    return CatalogGate(LocalCatalog(warehouse))


@pytest.fixture
def coverage(warehouse: Path) -> Iterator[CoverageStore]:
    store = CoverageStore(warehouse / "_zerobus" / "coverage.sqlite", TABLE)
    yield store
    store.close()


@pytest.fixture
def make_pool(coverage: CoverageStore) -> Iterator[PoolFactory]:
    """Pools with their own metrics registry (no counters shared across tests), closed after the test."""
    pools: list[StreamPool] = []

    def make(transport: Transport, config: PoolConfig = FAST_POOL) -> StreamPool:
        metrics = SinkMetrics(CollectorRegistry())
        pool = StreamPool(transport, TABLE, config, recorder=coverage, metrics=metrics, seed=7)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close(timeout=10)
