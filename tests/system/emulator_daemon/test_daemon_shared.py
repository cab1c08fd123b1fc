"""Two processes write one warehouse at once through one shared emulator (the multiprocess case)."""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path

import pyarrow.compute as pc

from tests.support.daemon_helpers import (
    TABLE,
    WorkerResult,
    daemon_config,
    delta_rows,
    starts_logged,
    state_of,
    write_worker,
)
from zerobus_orchestration.emulator.advert import ADVERT_FILE, pid_alive, read_advertisement
from zerobus_orchestration.runtime.registry import acquire_runtime

ROWS = 3_000


def test_two_processes_share_one_daemon_and_every_row_lands_once(warehouse: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    workers = [
        ctx.Process(target=write_worker, args=(str(warehouse), source, start, ROWS, barrier, out))
        for source, start in (("meters", 0), ("events", 100_000))
    ]
    for worker in workers:
        worker.start()
    results: list[WorkerResult | str] = []
    for _ in workers:
        try:
            results.append(out.get(timeout=120))
        except queue.Empty:
            break
    for worker in workers:
        worker.join(60)
    assert all(isinstance(r, WorkerResult) for r in results) and len(results) == 2, results
    assert [w.exitcode for w in workers] == [0, 0]

    # One daemon: both workers used the advertised pid, and exactly one start was made under the lock.
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert advert is not None and pid_alive(advert.pid)
    done = [r for r in results if isinstance(r, WorkerResult)]
    assert {r.emulator_pid for r in done} == {advert.pid}
    assert advert.pid not in {r.worker_pid for r in done}, "the emulator outlives the workers"
    assert starts_logged(warehouse) == 1
    assert all(r.rows_written == ROWS and r.delta_version is not None for r in done)

    # Durable in Delta, each row exactly once (the workers returned after delta_version materialised).
    table = delta_rows(warehouse)
    assert table.num_rows == 2 * ROWS
    for source, start in (("meters", 0), ("events", 100_000)):
        mine = table.filter(pc.equal(table["_twg_source"], source))
        assert sorted(mine["id"].to_pylist()) == list(range(start, start + ROWS))
        assert sorted(mine["_twg_offset"].to_pylist()) == list(range(ROWS))

    # Read back through the daemon's Iceberg facade from a third process (this one), same daemon.
    rt = acquire_runtime(daemon_config(warehouse))
    assert getattr(rt.emulator, "pid", None) == advert.pid
    for source in ("meters", "events"):
        report = rt.verify(TABLE, source=source)
        assert report.verified, report.to_json()
        assert report.rows_scanned == ROWS
    assert starts_logged(warehouse) == 1
