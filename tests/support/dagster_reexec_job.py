"""A reconstructable job for the re-execution test (``dg.execute_job`` needs one to re-execute a run).

The asset streams 1,000 rows; while ``fail_marker`` does not exist it creates it and fails after 600
rows, so the first run fails part-way and a re-execution of it succeeds with the same rows.
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa

from dagster_defs import ZerobusIOManager, ZerobusResource
from tests.support.dagster_support import fast_config

ROWS = 1_000
FAIL_AFTER = 600
KEY = dg.AssetKey(["raw", "reexecuted"])
SCHEMA = pa.schema([("event_id", pa.int64())])


def build_job(warehouse: str, fail_marker: str) -> dg.JobDefinition:
    @dg.asset(key=KEY)
    def reexecuted() -> pa.RecordBatchReader:
        marker = Path(fail_marker)
        first_run = not marker.exists()
        marker.touch()

        def batches() -> Iterator[pa.RecordBatch]:
            for start in range(0, ROWS, 100):
                if first_run and start == FAIL_AFTER:
                    raise RuntimeError(f"source went away after {FAIL_AFTER} rows")
                yield pa.record_batch({"event_id": pa.array(range(start, start + 100), pa.int64())})

        return pa.RecordBatchReader.from_batches(SCHEMA, batches())

    zerobus = ZerobusResource.from_config(fast_config(warehouse))
    defs = dg.Definitions(
        assets=[reexecuted],
        resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)},
        # In process: the test's own runtime (and embedded emulator) serves both runs.
        jobs=[dg.define_asset_job("reexecuted_job", executor_def=dg.in_process_executor)],
    )
    return defs.resolve_job_def("reexecuted_job")
