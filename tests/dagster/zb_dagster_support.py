"""Shared by the Dagster tests and the multiprocess job's step children (which must not import conftest)."""

from pathlib import Path

from zerobus_orchestration.config import (
    EmulatorConfig,
    EmulatorMode,
    ReadbackConfig,
    SdkStreamOptions,
    ZerobusConfig,
)

SHORT_SDK = SdkStreamOptions(
    recovery_timeout_ms=3_000,
    recovery_backoff_ms=100,
    recovery_retries=1,
    server_lack_of_ack_timeout_ms=10_000,
    flush_timeout_ms=20_000,
    connection_timeout_ms=5_000,
)


def fast_config(
    warehouse: Path | str,
    *,
    iceberg_lag_s: float = 0.3,
    mode: EmulatorMode = "in_process",
    idle_shutdown_s: float = 300.0,
) -> ZerobusConfig:
    """Short lags and timeouts. ``mode`` is always set explicitly: the resource's own default (a shared
    daemon per warehouse) is exercised by the tests that ask for ``mode="daemon"``."""
    return ZerobusConfig(
        warehouse=str(warehouse),
        emulator=EmulatorConfig(
            mode=mode, idle_shutdown_s=idle_shutdown_s, time_to_table_s=0.2, iceberg_lag_s=iceberg_lag_s
        ),
        sdk=SHORT_SDK,
        readback=ReadbackConfig(wait_timeout_s=30, poll_initial_s=0.05, poll_max_s=0.3),
    )
