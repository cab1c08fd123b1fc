"""Test-sized settings: the embedded default with short emulator lags and SDK timeouts.

The SDK's defaults (15 s per recovery attempt, 60 s lack-of-ack, 300 s flush) suit production and turn
a failing test into a minutes-long hang; these fail within seconds instead. Used by this package's own
tests and meant for users testing their pipelines against the embedded emulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerobus_orchestration.config import (
    EmulatorConfig,
    EmulatorMode,
    ReadbackConfig,
    SdkStreamOptions,
    ZerobusConfig,
)

TEST_SDK_OPTIONS = SdkStreamOptions(
    recovery_timeout_ms=3_000,
    recovery_backoff_ms=100,
    recovery_retries=2,
    server_lack_of_ack_timeout_ms=10_000,
    flush_timeout_ms=30_000,
    connection_timeout_ms=5_000,
)
FAULT_TEST_SDK_OPTIONS = SdkStreamOptions(
    recovery_timeout_ms=2_000,
    recovery_backoff_ms=50,
    recovery_retries=1,
    server_lack_of_ack_timeout_ms=5_000,
    flush_timeout_ms=5_000,
    connection_timeout_ms=2_000,
)
"""Tighter still, for tests that inject faults on purpose: the SDK gives up within a few seconds."""
TEST_READBACK = ReadbackConfig(wait_timeout_s=30, poll_initial_s=0.05, poll_max_s=0.5)


def embedded_test_config(
    warehouse: Path | str,
    *,
    mode: EmulatorMode = "in_process",
    time_to_table_s: float = 0.2,
    iceberg_lag_s: float = 0.3,
    **settings: Any,
) -> ZerobusConfig:
    """The embedded default on ``warehouse``, fast enough for tests.

    ``settings`` are further ``ZerobusConfig`` fields (``readback=``, ``state_dir=``, ...); emulator
    fields other than the ones named here go in ``emulator_settings``.
    """
    emulator_settings = dict(settings.pop("emulator_settings", {}))
    return ZerobusConfig(
        warehouse=str(warehouse),
        emulator=EmulatorConfig(
            mode=mode, time_to_table_s=time_to_table_s, iceberg_lag_s=iceberg_lag_s, **emulator_settings
        ),
        sdk=settings.pop("sdk", TEST_SDK_OPTIONS),
        readback=settings.pop("readback", TEST_READBACK),
        **settings,
    )
