from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runtime_helpers import fast_config
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ZerobusRuntime]:
    rt = acquire_runtime(fast_config(tmp_path / "wh"))
    try:
        yield rt
    finally:
        close_all_runtimes()
