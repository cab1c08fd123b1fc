"""Several processes writing coverage to one real SQLite file at once lose no range."""

from __future__ import annotations

import itertools
import multiprocessing
import random
from pathlib import Path

import pytest

from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey, OffsetRange

TABLES = ("main.raw.events", "main.raw.clicks")
KEYS = (CoverageKey("sink-1", "asset/orders", "p0"), CoverageKey("sink-2", "dag/task", ""))
N = 300


def planned_spans(worker: int, workers: int, seed: int) -> list[OffsetRange]:
    """Worker ``w`` owns chunks ``w, w+workers, ...`` of random length, plus overlaps into others'."""
    rnd = random.Random(seed)
    cuts = sorted({0, N, *rnd.sample(range(1, N), 60)})
    chunks = [OffsetRange(a, b) for a, b in itertools.pairwise(cuts)]
    mine = chunks[worker::workers]
    # Overlapping re-sends of spans another worker also confirms: merges must still only grow.
    extras = [OffsetRange(c.start, min(N, c.end + rnd.randint(0, 5))) for c in rnd.sample(chunks, 8)]
    spans = mine + extras
    random.Random(seed + worker).shuffle(spans)
    return spans


def write_with_own_store(path: str, worker: int, workers: int, seed: int) -> None:
    stores = [CoverageStore(path, table) for table in TABLES]
    try:
        for span in planned_spans(worker, workers, seed):
            for store in stores:
                for key in KEYS:
                    store.record(key, span)
    finally:
        for store in stores:
            store.close()


def write_with_inherited_store(store: CoverageStore, worker: int, workers: int, seed: int) -> None:
    for span in planned_spans(worker, workers, seed):
        store.record(KEYS[0], span)


def run_all(processes: list[multiprocessing.process.BaseProcess]) -> None:
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def fork_writers_with_own_stores(path: str, workers: int, seed: int) -> None:
    """Runs in a freshly spawned, single-threaded parent: fork the writers from there.

    Forking the pytest process itself would copy whatever its other threads hold at that instant
    (earlier tests leave Airflow's execution-API loop and HTTP handler threads behind); a SQLite mutex
    held by one of them stays locked forever in the child, which then hangs holding the file's write
    lock. That is a hazard of forking a threaded process, not of the coverage store, which is what this
    test is about.
    """
    ctx = multiprocessing.get_context("fork")
    run_all([ctx.Process(target=write_with_own_store, args=(path, w, workers, seed)) for w in range(workers)])


@pytest.mark.parametrize(
    "ctx", [multiprocessing.get_context("fork"), multiprocessing.get_context("spawn")], ids=["fork", "spawn"]
)
def test_processes_writing_at_once_lose_no_range(
    tmp_path: Path, ctx: multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext
) -> None:
    path = str(tmp_path / "_zerobus" / "coverage.sqlite")
    workers, seed = 4, 7
    if ctx.get_start_method() == "fork":
        run_all(
            [
                multiprocessing.get_context("spawn").Process(
                    target=fork_writers_with_own_stores, args=(path, workers, seed)
                )
            ]
        )
    else:
        run_all(
            [ctx.Process(target=write_with_own_store, args=(path, w, workers, seed)) for w in range(workers)]
        )
    for table in TABLES:
        with CoverageStore(path, table) as store:
            for key in KEYS:
                assert store.ranges(key) == (OffsetRange(0, N),), (table, key)
            assert store.high_water(KEYS[0]) == N


def fork_writers_with_inherited_store(path: str, workers: int, seed: int) -> None:
    """In a freshly spawned parent (see ``fork_writers_with_own_stores``): fork while holding a store."""
    with CoverageStore(path, TABLES[0]) as store:
        store.record(KEYS[0], OffsetRange(0, 1))  # the parent holds an open connection across fork
        ctx = multiprocessing.get_context("fork")
        run_all(
            [
                ctx.Process(target=write_with_inherited_store, args=(store, w, workers, seed))
                for w in range(workers)
            ]
        )
        assert store.ranges(KEYS[0]) == (OffsetRange(0, N),)


def test_store_inherited_through_fork_opens_its_own_connections(tmp_path: Path) -> None:
    path = str(tmp_path / "coverage.sqlite")
    spawn = multiprocessing.get_context("spawn")
    run_all([spawn.Process(target=fork_writers_with_inherited_store, args=(path, 3, 11))])
    with CoverageStore(path, TABLES[0]) as store:
        assert store.ranges(KEYS[0]) == (OffsetRange(0, N),)
