"""A reconstructable job for the multiprocess-executor test (step children import this module).

Built through ``dg.build_reconstructable_job`` with the warehouse and a log file as arguments; each
process records its runtime's pool shutdown in that file, pid-stamped.
"""

import logging

import dagster as dg
import pyarrow as pa

from dagster_defs import ZerobusIOManager, ZerobusResource, build_contract_asset
from tests.support.dagster_support import fast_config

ROWS = 2_000


def _log_runtime_to(path: str) -> None:
    logger = logging.getLogger("zerobus_orchestration")
    if any(isinstance(h, logging.FileHandler) and h.baseFilename == path for h in logger.handlers):
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(process)d %(name)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


METERS_KEY = dg.AssetKey(["raw", "meters"])
meters_contract = build_contract_asset(
    METERS_KEY, schema=pa.schema([("meter_id", pa.int64()), ("kwh", pa.float64())])
)


@dg.asset(key=METERS_KEY, deps=[meters_contract.key])
def meters() -> pa.Table:
    return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "kwh": pa.array([0.5] * ROWS)})


@dg.asset(key=["raw", "meter_events"], deps=[METERS_KEY])
def meter_events() -> pa.Table:
    # deps (not an input): sequential after raw/meters, one embedded emulator per warehouse at a time
    return pa.table({"meter_id": pa.array(range(ROWS), pa.int64()), "event": ["read"] * ROWS})


def build_job(warehouse: str, log_file: str) -> dg.JobDefinition:
    _log_runtime_to(log_file)
    zerobus = ZerobusResource.from_config(fast_config(warehouse))
    defs = dg.Definitions(
        assets=[meters_contract.asset, meters, meter_events],
        asset_checks=[meters_contract.checks] if meters_contract.checks else [],
        resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)},
        jobs=[
            dg.define_asset_job(
                "meters_multiprocess",
                selection=dg.AssetSelection.all() | dg.AssetSelection.all_asset_checks(),
                executor_def=dg.multiprocess_executor,
            )
        ],
    )
    return defs.resolve_job_def("meters_multiprocess")
