"""A writer process for the resume-from-the-table tests: streams until it is killed.

Run as ``python -m tests.support.truth_writer CONFIG_JSON ROWS BATCH_ROWS [WITHHOLD_AFTER]``.
``CONFIG_JSON``: the ``ZerobusConfig`` fields (its own state dir, an endpoint, ...). ``WITHHOLD_AFTER``:
the writer's own (in-process) emulator writes every batch after that many durably but never
acknowledges it, so the coverage cache stops while the table keeps growing: the window a crash
leaves between what was durable and what was recorded. Prints ``batch N`` after each batch is taken.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: ``tests`` is a package
from tests.support.killed_writer import SOURCE, TABLE, orders
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.faults import FaultSpec
from zerobus_orchestration.runtime.registry import acquire_runtime


def main() -> None:
    config = ZerobusConfig.model_validate(json.loads(sys.argv[1]))
    rows, batch_rows = int(sys.argv[2]), int(sys.argv[3])
    runtime = acquire_runtime(config)
    if len(sys.argv) > 4:
        assert runtime.emulator is not None, "WITHHOLD_AFTER needs the writer's own emulator"
        fault = FaultSpec(kind="withhold_acks", table=TABLE, after_batches=int(sys.argv[4]))
        runtime.emulator.faults.add(fault)  # type: ignore[attr-defined]
    runtime.write(TABLE, orders(rows, batch_rows, pause_s=0.005), source=SOURCE)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
