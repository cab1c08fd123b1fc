"""Keeping coverage small as history grows: settled keys' digests packed, idle keys let go.

Coverage gains one digest record per delivered batch; a year of daily partitions of 100 batches is
36,500 rows, each repeating the table, sink, source and partition. Two rules keep the file small and its
open time flat (``docs/performance.md``, "Coverage as history grows"):

* **Settled keys are packed.** A key (one source and partition) that no write recorded for
  ``zerobus.coverage.compact_after_s`` (a day by default) is settled: its digest records are replaced by
  one packed row (``coverage/packs.py``) holding the records a resume would check (the latest record
  wins where a range was sent twice; the superseded ones were never checked). Nothing a resume verifies
  changes: each packed record still vouches for its own range, so an input that changed is still refused
  and the error still names the range whose rows differ. A key recorded again later gets loose records
  beside its pack, newer than it, and is packed again once it settles. Ranges need no compaction: a
  write merges each range into the ones it touches (adjacent ranges become one).
* **Idle keys are let go** after ``zerobus.coverage.retention_days`` (400 by default, so a yearly re-run
  still checks its input; None keeps everything). A later resume of such a partition learns what is
  delivered from the table itself (``resume/truth.py``), as a fresh host would: nothing is sent twice,
  but the skipped rows are not checked against the input's content (it warns).

A write runs this once it is durable (``run_due``), at most once per ``_INTERVAL_S`` per store in a
process, and each run takes at most ``max_keys`` keys, so no write pays for a backlog at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from zerobus_orchestration.config import CoverageConfig
from zerobus_orchestration.coverage.digest import ALGORITHMS
from zerobus_orchestration.coverage.packs import latest_records
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey

log = logging.getLogger(__name__)

DAY_S = 86_400.0
DEFAULT_MAX_KEYS = 32
_INTERVAL_S = 600.0
_due_lock = threading.Lock()
_last_run: dict[tuple[str, str], float] = {}


@dataclass(frozen=True)
class CompactionReport:
    """What one ``compact`` did."""

    keys_packed: int = 0
    records_packed: int = 0  # loose digest records taken into packs
    keys_dropped: int = 0
    keys_left: bool = False  # ``max_keys`` stopped it: more are due


def compact(
    store: CoverageStore,
    *,
    compact_after_s: float,
    retention_days: float | None,
    max_keys: int = DEFAULT_MAX_KEYS,
    now_us: int | None = None,
) -> CompactionReport:
    """Pack the digests of ``store``'s settled keys and drop its idle ones (see the module docstring)."""
    now = time.time_ns() // 1_000 if now_us is None else now_us
    dropped: tuple[CoverageKey, ...] = ()
    if retention_days is not None:
        cutoff = now - int(retention_days * DAY_S * 1e6)
        dropped = store.idle_keys(recorded_before_us=cutoff, limit=max_keys)
        store.drop(dropped)
    due = store.idle_keys(
        recorded_before_us=now - int(compact_after_s * 1e6), limit=max_keys + 1, with_loose_digests=True
    )
    packed = records = 0
    for key in due[:max_keys]:
        if any(d.algorithm not in ALGORITHMS for d in store.digests(key)):
            continue  # a later release's records: kept as they are, for that release to check
        taken = store.repack(key, latest_records)
        if taken:
            packed += 1
            records += taken
    return CompactionReport(packed, records, len(dropped), len(dropped) == max_keys or len(due) > max_keys)


def run_due(store: CoverageStore, settings: CoverageConfig) -> CompactionReport | None:
    """``compact`` with the configured rules, if this process has not done so for ``store`` lately.

    Never fails the write that calls it: the state it would shrink is still correct as it is."""
    where = (str(store.path), store.table.full_name)
    now = time.monotonic()
    with _due_lock:
        last = _last_run.get(where)
        if last is not None and now - last < _INTERVAL_S:
            return None
        _last_run[where] = now
    try:
        report = compact(
            store, compact_after_s=settings.compact_after_s, retention_days=settings.retention_days
        )
    except Exception as exc:  # logged, not swallowed silently: the write itself succeeded
        log.warning(
            "%s: coverage compaction skipped (%s: %s)", store.table.full_name, type(exc).__name__, exc
        )
        return None
    if report.keys_packed or report.keys_dropped:
        log.info(
            "%s: coverage compacted: %d settled partition(s) packed (%d digest records), %d idle one(s) "
            "let go after the retention",
            store.table.full_name,
            report.keys_packed,
            report.records_packed,
            report.keys_dropped,
        )
    return report
