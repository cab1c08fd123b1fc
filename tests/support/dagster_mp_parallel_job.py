"""A reconstructable job whose two assets run at the same time in two step processes, on one embedded
warehouse (the step children import this module; built with the warehouse and a rendezvous folder)."""

import time
from pathlib import Path

import dagster as dg
import pyarrow as pa

from dagster_defs import ZerobusIOManager, ZerobusResource
from tests.support.dagster_support import fast_config

ROWS = 2_000
RENDEZVOUS_TIMEOUT_S = 90.0


def _rendezvous(folder: str, me: str, other: str) -> None:
    """Return only once the other step has started too: proof that the two steps overlap."""
    Path(folder, me).touch()
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
    while not Path(folder, other).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"step {me}: step {other} never ran alongside it")
        time.sleep(0.05)


def build_job(warehouse: str, rendezvous: str) -> dg.JobDefinition:
    @dg.asset(key=["raw", "meters"])
    def meters(zerobus: ZerobusResource) -> pa.Table:
        zerobus.runtime  # noqa: B018 -- connect to (or start) the shared emulator before meeting
        _rendezvous(rendezvous, "meters", "meter_events")
        return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "kwh": pa.array([0.5] * ROWS)})

    @dg.asset(key=["raw", "meter_events"])
    def meter_events(zerobus: ZerobusResource) -> pa.Table:
        zerobus.runtime  # noqa: B018
        _rendezvous(rendezvous, "meter_events", "meters")
        return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "event": ["read"] * ROWS})

    # No emulator.mode set: the resource's embedded default, one shared emulator process per warehouse.
    cfg = fast_config(warehouse)
    options = {k: v for k, v in ZerobusResource.from_config(cfg).options.items() if k != "emulator.mode"}
    zerobus = ZerobusResource(use_environment=False, options=options)
    defs = dg.Definitions(
        assets=[meters, meter_events],
        resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)},
        jobs=[
            dg.define_asset_job(
                "meters_parallel", selection=dg.AssetSelection.all(), executor_def=dg.multiprocess_executor
            )
        ],
    )
    return defs.resolve_job_def("meters_parallel")
