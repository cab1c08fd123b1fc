"""The read-back sensor verifies the materialisation's own record with a read-only service, and a tick
that verified something says so (Dagster shows a tick without runs as skipped, with its skip reason).

The run's runtime is closed before the sensor is evaluated, as in the daemon's pod, which never wrote:
the tick must build no write runtime, and it evaluates through ``SensorDefinition.evaluate_tick`` over
a real instance, which is what the daemon records as the tick's status and message.
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from dagster_defs import ZerobusIOManager, ZerobusResource, build_readback_sensor
from tests.support.dagster_support import fast_config
from zerobus_orchestration.config import CoverageConfig
from zerobus_orchestration.runtime.registry import close_all_runtimes, running_runtime

KEY = dg.AssetKey(["raw", "taps"])
EMPTY_RESULT = "Sensor function returned an empty result"


@dg.asset(key=KEY)
def taps() -> pa.Table:
    return pa.table({"tap_id": pa.array(range(200), pa.int64())})


@pytest.fixture(autouse=True)
def _no_runtimes_left() -> Iterator[None]:
    yield
    close_all_runtimes()


def test_a_tick_that_verified_says_what_and_builds_no_write_runtime(tmp_path: Path) -> None:
    config = fast_config(tmp_path / "warehouse", iceberg_lag_s=0.2)
    writer = ZerobusResource.from_config(config)
    instance = dg.DagsterInstance.ephemeral()
    resources = {"zerobus": writer, "io_manager": ZerobusIOManager(zerobus=writer)}
    assert dg.materialize([taps], resources=resources, instance=instance).success
    close_all_runtimes()  # the run worker is gone; the sensor runs elsewhere

    # The sensor's host has no coverage file: only the materialisation's record says what was delivered.
    elsewhere = config.model_copy(
        update={"coverage": CoverageConfig(location=str(tmp_path / "daemon-pod" / "coverage.sqlite"))}
    )
    sensor_resource = ZerobusResource.from_config(elsewhere)
    sensor = build_readback_sensor([KEY], check_name="iceberg_readback", max_lag_s=600)
    definitions = dg.Definitions(assets=[taps], sensors=[sensor])

    data: dg.SensorExecutionData | None = None
    cursor: str | None = None
    for _ in range(100):  # ticks until Iceberg shows the rows (the emulated lag is 0.2 s)
        with dg.build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"zerobus": sensor_resource},
            definitions=definitions,
        ) as context:
            data = sensor.evaluate_tick(context)
        assert running_runtime(elsewhere) is None, "a read-back tick must not build a write runtime"
        if data.asset_events:
            break
        assert data.skip_message and data.skip_message != EMPTY_RESULT
    assert data is not None and data.asset_events, data

    assert data.skip_message != EMPTY_RESULT
    assert "raw/taps: verified 200 delivered row(s) of main.raw.taps" in (data.skip_message or "")
    assert "0 duplicate(s)" in (data.skip_message or "")
    observation = next(e for e in data.asset_events if isinstance(e, dg.AssetObservation))
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["readback/verified"] is True and meta["readback/expected_from"] == "write_record"
    assert not Path(elsewhere.coverage_location).exists(), "the verifier keeps no coverage of its own"
