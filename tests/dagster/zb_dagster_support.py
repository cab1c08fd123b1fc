"""Shared by the Dagster tests and the multiprocess job's step children (which must not import conftest)."""

from pathlib import Path

from zerobus_orchestration.config import EmulatorConfig, ReadbackConfig, SdkStreamOptions, ZerobusConfig

SHORT_SDK = SdkStreamOptions(
    recovery_timeout_ms=3_000,
    recovery_backoff_ms=100,
    recovery_retries=1,
    server_lack_of_ack_timeout_ms=10_000,
    flush_timeout_ms=20_000,
    connection_timeout_ms=5_000,
)


def fast_config(warehouse: Path | str, *, iceberg_lag_s: float = 0.3) -> ZerobusConfig:
    return ZerobusConfig(
        warehouse=str(warehouse),
        emulator=EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=iceberg_lag_s),
        sdk=SHORT_SDK,
        readback=ReadbackConfig(wait_timeout_s=30, poll_initial_s=0.05, poll_max_s=0.3),
    )
