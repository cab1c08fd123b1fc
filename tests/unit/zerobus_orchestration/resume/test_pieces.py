"""The resume marks file (``resume.pieces.HandedOut``): real SQLite, real processes opening it at once."""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path

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


def test_steps_opening_a_new_marks_file_at_once_all_record_their_marks() -> None:
    """Several steps of one host resuming at once on a fresh state dir: each opens the new file and
    switches it to WAL; SQLite refuses a concurrent switch at once ("database is locked") without
    waiting, which failed those writes."""
    fork = multiprocessing.get_context("fork")
    failures: list[str] = []
    for trial in range(TRIALS):
        path = Path(tempfile.mkdtemp()) / MARKS_FILE
        start, errors = fork.Barrier(OPENERS), fork.Queue()
        openers = [
            fork.Process(target=_open_and_mark, args=(str(path), f"s{i}", start, errors))
            for i in range(OPENERS)
        ]
        for process in openers:
            process.start()
        for process in openers:
            process.join(timeout=60)
        while not errors.empty():
            failures.append(f"trial {trial}: {errors.get()}")
        if failures:
            break
        marks = [
            HandedOut(path, "main.raw.t", CoverageKey("sink", f"s{i}", "")).high() for i in range(OPENERS)
        ]
        assert marks == [10] * OPENERS
    assert failures == []
