"""The CLI's embedded default is the warehouse's shared emulator daemon, which outlives the command by
``emulator.idle_shutdown_s``: stop every daemon a test's warehouses got, so none outlives the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_helpers import kill_daemons


@pytest.fixture(autouse=True)
def _stop_cli_daemons(tmp_path: Path) -> Iterator[None]:
    yield
    for state in tmp_path.rglob("_zerobus"):
        kill_daemons(state.parent)
