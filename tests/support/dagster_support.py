"""Shared by the Dagster tests and the multiprocess job's step children (which must not import conftest)."""

from pathlib import Path

from zerobus_orchestration.config import EmulatorMode, ReadbackConfig, ZerobusConfig
from zerobus_orchestration.testing.settings import embedded_test_config


def fast_config(
    warehouse: Path | str,
    *,
    iceberg_lag_s: float = 0.3,
    mode: EmulatorMode = "in_process",
    idle_shutdown_s: float = 300.0,
) -> ZerobusConfig:
    """Short lags and timeouts. ``mode`` is always set explicitly: the resource's own default (a shared
    daemon per warehouse) is exercised by the tests that ask for ``mode="daemon"``."""
    return embedded_test_config(
        warehouse,
        mode=mode,
        iceberg_lag_s=iceberg_lag_s,
        emulator_settings={"idle_shutdown_s": idle_shutdown_s},
        readback=ReadbackConfig(wait_timeout_s=30, poll_initial_s=0.05, poll_max_s=0.3),
    )
