"""Hosts of the Dagster many-machines test, run as their own processes (``python -m`` this module).

``run INSTANCE_DIR STATE_ROOT OUT [PARENT_RUN_ID]``: a multiprocess run (one process per step) of the
assets below, written through the production configuration (only ``ZEROBUS_*`` variables). Each step's
Zerobus resource has its own state dir, ``STATE_ROOT/<step key>``, as a run worker in its own pod would.
With ``PARENT_RUN_ID``: a re-execution of that run from its failure. Writes the run id, its success, the
step pids, step failures and each materialisation's ``zerobus/*`` metadata as JSON to ``OUT``.

``sensor INSTANCE_DIR OUT``: the read-back sensor ticked over the same Dagster instance (the daemon's
pod: the process's own ``ZEROBUS_STATE_DIR``, nothing of the run workers'), until it judged every
asset's materialisation or 90 s passed. Writes each tick's skip message and events as JSON to ``OUT``.

The instance is persistent (``DAGSTER_HOME`` = INSTANCE_DIR) so every process sees the same event log.
With ``PID_FILE_ENV`` set, the ``mh/events`` step writes its pid there before returning its output, so
the test can SIGKILL it mid-write from outside.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from dagster_defs import ZerobusIOManager, ZerobusResource, build_readback_sensor

ROWS = 3_000
EVENT_ROWS = 200_000  # big enough that a throttled writer is still mid-write after its first commit
METERS = dg.AssetKey(["mh", "meters"])  # -> main.mh.meters
READINGS = dg.AssetKey(["mh", "readings"])  # -> main.mh.readings
EVENTS = dg.AssetKey(["mh", "events"])  # -> main.mh.events
ASSETS = (METERS, READINGS, EVENTS)
STEPS = {"mh__meters": "io_meters", "mh__readings": "io_readings", "mh__events": "io_events"}
CHECK = "iceberg_readback"
PID_FILE_ENV = "MANY_MACHINES_EVENTS_PID_FILE"


@dg.asset(key=METERS, io_manager_key="io_meters")
def meters() -> pa.Table:
    return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "site": ["s"] * ROWS})


@dg.asset(key=READINGS, io_manager_key="io_readings")
def readings() -> pa.Table:
    # No dependencies between the assets: the steps run at the same time, each in its own process.
    return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "kwh": pa.array([0.25] * ROWS)})


@dg.asset(key=EVENTS, io_manager_key="io_events")
def events() -> pa.Table:
    pid_file = os.environ.get(PID_FILE_ENV)
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    ids = pa.array(range(EVENT_ROWS), pa.int64())
    return pa.table({"event_id": ids, "payload": pa.array(["x" * 40] * EVENT_ROWS)})


def _io_managers(state_root: str | None) -> dict[str, ZerobusIOManager]:
    """Everything from the ``ZEROBUS_*`` environment; with ``state_root``, each step's own ``state_dir``."""
    return {
        io_key: ZerobusIOManager(
            zerobus=ZerobusResource(
                options={} if state_root is None else {"state_dir": f"{state_root}/{step}"}
            )
        )
        for step, io_key in STEPS.items()
    }


def build_job(state_root: str) -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=[meters, readings, events],
        resources=_io_managers(state_root),
        jobs=[
            dg.define_asset_job(
                "many_machines", selection=dg.AssetSelection.all(), executor_def=dg.multiprocess_executor
            )
        ],
    )
    return defs.resolve_job_def("many_machines")


def _run(state_root: str, out: Path, parent_run_id: str | None) -> int:
    job = dg.build_reconstructable_job(
        "tests.support.dagster_many_machines",
        "build_job",
        reconstructable_args=(state_root,),
        reconstructor_working_directory=os.getcwd(),
    )
    with dg.DagsterInstance.get() as instance:
        again = None if parent_run_id is None else dg.ReexecutionOptions.from_failure(parent_run_id, instance)
        # forkserver: step processes start in about a second instead of a few (a fresh interpreter each).
        start = {"execution": {"config": {"start_method": {"forkserver": {}}}}}
        result = dg.execute_job(job, instance=instance, run_config=start, reexecution_options=again)
        pids = {
            e.step_key: e.pid for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_START
        }
        failures = [f"{e.step_key}: {e.message}" for e in result.all_events if e.is_failure and e.step_key]
        written = {
            e.asset_key.to_user_string(): {
                k: v.value for k, v in e.materialization.metadata.items() if k.startswith("zerobus/")
            }
            for e in result.get_asset_materialization_events()
            if e.asset_key is not None
        }
    report = {
        "run_id": result.run_id,
        "success": result.success,
        "pids": pids,
        "failures": failures,
        "written": written,
    }
    out.write_text(json.dumps(report))
    return 0


def _event(event: Any) -> dict[str, Any]:
    metadata = {k: v.value for k, v in event.metadata.items()}
    asset = event.asset_key.to_user_string()
    if isinstance(event, dg.AssetCheckEvaluation):
        return {
            "kind": "check",
            "asset": asset,
            "check": event.check_name,
            "passed": event.passed,
            **metadata,
        }
    return {"kind": "observation", "asset": asset, **metadata}


def _sensor(out: Path) -> int:
    sensor = build_readback_sensor(list(ASSETS), check_name=CHECK, max_lag_s=600)
    # The code location's definitions, as the daemon loads them; the tick itself uses only ``zerobus``.
    definitions = dg.Definitions(
        assets=[meters, readings, events], sensors=[sensor], resources=_io_managers(None)
    )
    zerobus = ZerobusResource()  # the daemon's pod: ZEROBUS_* only, its own empty state dir
    ticks: list[dict[str, Any]] = []
    cursor: str | None = None
    deadline = time.monotonic() + 90
    with dg.DagsterInstance.get() as instance:
        while time.monotonic() < deadline:
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, resources={"zerobus": zerobus}, definitions=definitions
            ) as context:
                data = sensor.evaluate_tick(context)
            cursor = data.cursor or cursor
            emitted = [_event(e) for e in data.asset_events]
            ticks.append({"skip": data.skip_message, "events": emitted, "runs": len(data.run_requests or [])})
            judged = {e["asset"] for t in ticks for e in t["events"] if e["kind"] == "observation"}
            if judged >= {key.to_user_string() for key in ASSETS}:
                break
            time.sleep(0.3)
    out.write_text(json.dumps({"ticks": ticks, "cursor": cursor}, default=str))
    return 0


def main(argv: list[str]) -> int:
    command, instance_dir = argv[0], argv[1]
    os.environ["DAGSTER_HOME"] = instance_dir
    if command == "run":
        return _run(argv[2], Path(argv[3]), argv[4] if len(argv) > 4 else None)
    return _sensor(Path(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
