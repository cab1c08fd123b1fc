"""The default multiprocess executor: one runtime (pool + embedded emulator) per step process, each drained
and closed when its process exits, nothing left unflushed."""

from pathlib import Path

import dagster as dg
import pytest
from dagster_mp_job import ROWS
from zb_dagster_support import fast_config

from dagster_defs import ZerobusResource

pytestmark = pytest.mark.slow


def test_multiprocess_executor_one_pool_per_step_process(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    log_file = tmp_path / "runtime.log"
    with dg.instance_for_test() as instance:
        job = dg.build_reconstructable_job(
            "dagster_mp_job",
            "build_job",
            reconstructable_args=(str(warehouse), str(log_file)),
            reconstructor_working_directory=str(Path(__file__).parent),
        )
        result = dg.execute_job(job, instance=instance)
        assert result.success
        starts = {
            e.step_key: e.pid for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_START
        }
        evaluations = result.get_asset_check_evaluations()
    assert set(starts) == {
        "raw__meters__contract",
        "raw__meters__contract_primary_raw",
        "raw__meters",
        "raw__meter_events",
    }
    assert len(set(starts.values())) == len(starts), "each step runs in its own process"
    assert len(evaluations) == 5 and all(e.passed for e in evaluations)

    closed = log_file.read_text().splitlines()
    for step in ("raw__meters", "raw__meter_events"):
        pid = starts[step]
        pool_lines = [line for line in closed if line.startswith(f"{pid} ") and "stream pool closed" in line]
        assert len(pool_lines) == 1, (
            f"step {step} (pid {pid}) must open one pool and close it at exit: {closed}"
        )

    # Back in this process (the children and their emulators are gone): everything is durable and visible.
    rt = ZerobusResource.from_config(fast_config(warehouse)).runtime
    for table, source in (("main.raw.meters", "raw/meters"), ("main.raw.meter_events", "raw/meter_events")):
        report = rt.readback(table, source=source)
        assert report.verified, report.as_dict()
        assert report.rows_scanned == ROWS
