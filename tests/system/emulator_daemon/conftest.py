"""Daemon-mode tests run real processes; every daemon a test started is killed in its teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_helpers import kill_daemons
from zerobus_orchestration.runtime.registry import close_all_runtimes


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "wh"
    try:
        yield path
    finally:
        close_all_runtimes()
        kill_daemons(path)
