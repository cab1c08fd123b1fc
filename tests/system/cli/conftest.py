"""The CLI's embedded default is the warehouse's shared emulator daemon, which outlives the command by
``emulator.idle_shutdown_s``: stop every daemon a test's warehouses got, so none outlives the test.

Tests that only need a daemon to write through share one warehouse per worker (``shared_warehouse``),
so its daemon starts once instead of once per test; each such test writes tables of its own names
(``unique_table``). A test about a fresh warehouse, the daemon's own life or other emulator settings
keeps a warehouse under its ``tmp_path``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_helpers import kill_daemons

# The shared daemon's emulator runs with the settings of the command that started it, so every test on
# the shared warehouse sets the same ones (``shared_warehouse`` does).
SHARED_SETTINGS = {
    "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.2",
    "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2",
    "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
}


@pytest.fixture(autouse=True)
def _stop_cli_daemons(tmp_path: Path) -> Iterator[None]:
    yield
    for state in tmp_path.rglob("_zerobus"):
        kill_daemons(state.parent)


@pytest.fixture(scope="session")
def _shared_warehouse_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("cli-shared") / "wh"
    yield path
    kill_daemons(path)


@pytest.fixture
def shared_warehouse(_shared_warehouse_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This worker's shared warehouse, with the shared daemon's settings in the environment."""
    for name, value in SHARED_SETTINGS.items():
        monkeypatch.setenv(name, value)
    return _shared_warehouse_path


@pytest.fixture
def unique_table() -> str:
    return f"main.raw.t_{uuid.uuid4().hex[:10]}"
