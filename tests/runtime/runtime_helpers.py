"""Shared settings for the runtime tests (a uniquely named module: every test folder has a conftest)."""

from __future__ import annotations

from pathlib import Path

from zerobus_orchestration.config import EmulatorConfig, ReadbackConfig, SdkStreamOptions, ZerobusConfig


def fast_config(warehouse: Path) -> ZerobusConfig:
    """The embedded default with short emulator lags and SDK timeouts, for tests."""
    return ZerobusConfig(
        warehouse=str(warehouse),
        emulator=EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.3),
        sdk=SdkStreamOptions(
            recovery_timeout_ms=3_000,
            recovery_backoff_ms=100,
            recovery_retries=2,
            server_lack_of_ack_timeout_ms=10_000,
            flush_timeout_ms=30_000,
            connection_timeout_ms=5_000,
        ),
        readback=ReadbackConfig(wait_timeout_s=30, poll_initial_s=0.05, poll_max_s=0.5),
    )
