"""The resume marks file (``resume.pieces.HandedOut``): real SQLite, real processes opening it at once.

A system test (it forks OPENERS processes per trial) and ``slow`` (TRIALS trials: a race soak).
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from zerobus_orchestration.ranges import CoverageKey
from zerobus_orchestration.resume.pieces import MARKS_FILE, HandedOut

OPENERS = 6
TRIALS = 40  # one race in ~6 trials failed before the fix (6 processes); 40 make a miss ~0.1 % likely


def _open_and_mark(path: str, source: str, start: object, errors: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    try:
        marks = HandedOut(Path(path), "main.raw.t", CoverageKey("sink", source, ""))
        marks.high()
        marks.raise_to(10)
        marks.close()
    except Exception as exc:  # reported to the test, which names it
        errors.put(f"{source}: {exc!r}")  # type: ignore[attr-defined]


def _run_trials(root: str, report: Any) -> None:
    """In a freshly spawned, single-threaded parent that forks the openers: forking the pytest process
    itself would copy whatever its other threads hold at that instant (earlier tests leave Airflow's and
    gRPC's threads behind), and a child could hang on a lock one of them held."""
    fork = multiprocessing.get_context("fork")
    for trial in range(TRIALS):
        path = Path(root) / str(trial) / MARKS_FILE
        path.parent.mkdir()
        start, errors = fork.Barrier(OPENERS), fork.Queue()
        openers = [
            fork.Process(target=_open_and_mark, args=(str(path), f"s{i}", start, errors))
            for i in range(OPENERS)
        ]
        for process in openers:
            process.start()
        for process in openers:
            process.join(timeout=60)
        failures: list[str] = []
        while not errors.empty():
            failures.append(f"trial {trial}: {errors.get()}")
        if not failures:
            marks = [
                HandedOut(path, "main.raw.t", CoverageKey("sink", f"s{i}", "")).high() for i in range(OPENERS)
            ]
            if marks != [10] * OPENERS:
                failures.append(f"trial {trial}: marks {marks}")
        if failures:
            report.put(failures)
            return
    report.put([])


@pytest.mark.slow
def test_steps_opening_a_new_marks_file_at_once_all_record_their_marks(tmp_path: Path) -> None:
    """Several steps of one host resuming at once on a fresh state dir: each opens the new file and
    switches it to WAL; SQLite refuses a concurrent switch at once ("database is locked") without
    waiting, which failed those writes."""
    spawn = multiprocessing.get_context("spawn")
    report = spawn.Queue()
    parent = spawn.Process(target=_run_trials, args=(str(tmp_path), report))
    parent.start()
    failures = report.get(timeout=170)
    parent.join(timeout=30)
    assert parent.exitcode == 0
    assert failures == []
