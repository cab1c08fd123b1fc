"""A writer process for the resume test: streams a deterministic input slowly until it is killed.

Run as ``python killed_writer.py WAREHOUSE ROWS BATCH_ROWS``; prints ``batch N`` after each push so
the test knows the write is under way. It never finishes on its own within the test's patience.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: ``tests`` is a package
from tests.support.runtime_helpers import resume_config
from zerobus_orchestration.runtime.registry import acquire_runtime

TABLE = "main.raw.resumed"
SOURCE = "orders"


def orders(rows: int, batch_rows: int, *, pause_s: float = 0.0) -> Iterator[pa.RecordBatch]:
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        if pause_s:
            time.sleep(pause_s)
            print(f"batch {start // batch_rows}", flush=True)
        yield pa.record_batch(
            {"order_id": pa.array(range(start, start + n), pa.int64()), "amount": pa.array([1.5] * n)}
        )


def main() -> None:
    warehouse, rows, batch_rows = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    runtime = acquire_runtime(resume_config(warehouse))
    runtime.write(TABLE, orders(rows, batch_rows, pause_s=0.02), source=SOURCE)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
