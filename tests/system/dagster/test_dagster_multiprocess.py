"""The default multiprocess executor: one runtime (pool) per step process, each drained and closed when its
process exits, nothing left unflushed; steps that run in parallel share one emulator process per warehouse."""

import os
import signal
import time
from pathlib import Path

import dagster as dg
import pytest

from dagster_defs import ZerobusResource
from tests.support.dagster_mp_job import ROWS
from tests.support.dagster_mp_parallel_job import ROWS as PARALLEL_ROWS
from tests.support.dagster_support import fast_config
from zerobus_orchestration.emulator.advert import ADVERT_FILE, LOG_FILE, pid_alive, read_advertisement
from zerobus_orchestration.emulator.launcher import START_MARKER
from zerobus_orchestration.runtime.registry import close_all_runtimes

REPO = Path(__file__).resolve().parents[3]  # step processes import ``tests.support.*`` from here

pytestmark = pytest.mark.slow


# spawn (the default): children leave through sys.exit, so atexit would do. forkserver: children leave
# through os._exit, so only the lazily registered multiprocessing Finalize hook can close their pool.
START_METHODS = {
    "default": None,
    "forkserver": {"execution": {"config": {"start_method": {"forkserver": {}}}}},
}


@pytest.mark.parametrize("start_method", list(START_METHODS))
def test_multiprocess_executor_one_pool_per_step_process(tmp_path: Path, start_method: str) -> None:
    warehouse = tmp_path / "warehouse"
    log_file = tmp_path / "runtime.log"
    with dg.instance_for_test() as instance:
        job = dg.build_reconstructable_job(
            "tests.support.dagster_mp_job",
            "build_job",
            reconstructable_args=(str(warehouse), str(log_file)),
            reconstructor_working_directory=str(REPO),
        )
        result = dg.execute_job(job, instance=instance, run_config=START_METHODS[start_method])
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
        report = rt.verify(table, source=source)
        assert report.verified, report.to_json()
        assert report.rows_scanned == ROWS


def _stop_daemon(warehouse: Path) -> None:
    """Teardown: the shared emulator outlives the run by design; nothing may outlive the test."""
    state = Path(fast_config(warehouse).state_path)
    advert = read_advertisement(state / ADVERT_FILE)
    if advert is not None and pid_alive(advert.pid):
        os.kill(advert.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while pid_alive(advert.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(advert.pid):
            os.kill(advert.pid, signal.SIGKILL)


def test_multiprocess_executor_parallel_steps_share_one_emulator(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    try:
        with dg.instance_for_test() as instance:
            job = dg.build_reconstructable_job(
                "tests.support.dagster_mp_parallel_job",
                "build_job",
                reconstructable_args=(str(warehouse), str(rendezvous)),
                reconstructor_working_directory=str(REPO),
            )
            result = dg.execute_job(job, instance=instance)
            assert result.success, [e.message for e in result.all_events if e.is_failure]
            starts = {
                e.step_key: e.pid for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_START
            }
        assert set(starts) == {"raw__meters", "raw__meter_events"}
        assert len(set(starts.values())) == 2, "each step runs in its own process"

        # One emulator process served both steps: started once (under the lock), still advertised.
        state = Path(fast_config(warehouse).state_path)
        advert = read_advertisement(state / ADVERT_FILE)
        assert advert is not None and pid_alive(advert.pid)
        assert advert.pid not in starts.values()
        assert (state / LOG_FILE).read_text().count(START_MARKER) == 1

        rt = ZerobusResource.from_config(fast_config(warehouse, mode="daemon")).runtime
        assert getattr(rt.emulator, "pid", None) == advert.pid
        for table, source in (
            ("main.raw.meters", "raw/meters"),
            ("main.raw.meter_events", "raw/meter_events"),
        ):
            report = rt.verify(table, source=source)
            assert report.verified, report.to_json()
            assert report.rows_scanned == PARALLEL_ROWS
    finally:
        close_all_runtimes()
        _stop_daemon(warehouse)
