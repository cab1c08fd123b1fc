"""A recorded range survives a crash of the recording process (``synchronous = NORMAL`` in WAL mode: see
tests/unit/zerobus_orchestration/coverage/test_store_durability.py). A real process, SIGKILLed."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey, OffsetRange

TABLE = "main.raw.events"
KEY = CoverageKey("sink-a", "asset/orders", "")


def _record_then_die(path: str) -> None:
    store = CoverageStore(path, TABLE)
    digest = RangeDigest(KEY, OffsetRange(0, 5), None, 5, b"\x01" * 16)
    store.record_delivered([(KEY, OffsetRange(0, 5))], [digest])
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: the process just dies


def test_a_recorded_range_survives_a_crash_of_the_recording_process(tmp_path: Path) -> None:
    path = str(tmp_path / "coverage.sqlite")
    child = multiprocessing.get_context("spawn").Process(target=_record_then_die, args=(path,))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL  # the fault acted: killed, not a clean exit
    with CoverageStore(path, TABLE) as store:
        assert store.ranges(KEY) == (OffsetRange(0, 5),)
        (digest,) = store.digests(KEY)
        assert digest.digest == b"\x01" * 16
