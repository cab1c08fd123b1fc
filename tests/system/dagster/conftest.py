"""Dagster tests run against the embedded emulator through the real runtime (official SDK, Delta, Iceberg).

Each test gets its own warehouse, hence its own config hash and runtime; the runtime is closed when the
test ends so emulators do not pile up across the suite.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from dagster_defs import ZerobusIOManager, ZerobusResource
from tests.support.dagster_support import fast_config
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.runtime.registry import close_all_runtimes


@pytest.fixture(autouse=True)
def _close_runtimes() -> Iterator[None]:
    yield
    close_all_runtimes()


@pytest.fixture
def zb_config(tmp_path: Path) -> ZerobusConfig:
    return fast_config(tmp_path / "warehouse")


@pytest.fixture
def zerobus(zb_config: ZerobusConfig) -> ZerobusResource:
    return ZerobusResource.from_config(zb_config)


@pytest.fixture
def resources(zerobus: ZerobusResource) -> dict[str, object]:
    return {"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus, catalog="main")}
