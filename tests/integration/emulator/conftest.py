"""Fixtures for the emulator tests: a running Emulator, target tables, short SDK timeouts.

Every test here drives the official ``databricks-zerobus-ingest-sdk`` against the emulator over
plaintext HTTP/2; nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.emulator_helpers import create_table
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK tunnels even 127.0.0.1 through *_proxy variables (docs/architecture.md#the-zerobus-service-and-the-official-sdk)."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy", "GRPC_PROXY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    path.mkdir()
    create_table(path)
    return path


@pytest.fixture
def emulator_config() -> EmulatorConfig:
    return EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0)


@pytest.fixture
def emulator(warehouse: Path, emulator_config: EmulatorConfig) -> Iterator[Emulator]:
    with Emulator(str(warehouse), emulator_config, iceberg=False) as emu:
        yield emu
