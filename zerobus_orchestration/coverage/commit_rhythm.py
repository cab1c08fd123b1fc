"""The service's commit rhythm within a write, read from the table's Delta log: how long a resume on
another host waits for rows acknowledged before a crash to become visible.

Zerobus commits what it acknowledged to the table every few seconds (the emulator every
``time_to_table_s``). A resume reading the table between two commits would take it as complete and
send again what the next commit holds, so it waits until the table has not changed for a period the
rhythm sets (``resume/truth.py``). The gaps between the table's data commits show that rhythm, but only
while rows kept flowing: the gap between the last commit of one run and the first of the next is the
idle time between them, which says nothing about the service. Taken for its rhythm, a table written
every few seconds by separate runs made every resume wait ``coverage.catch_up_max_s`` and warn.

So a gap counts only when the rows of the later commit were stamped (``_twg_emit_ts``, on the writer's
clock) less than half the gap after the last rows of the earlier one: the writers kept sending across
the commit. Each commit's stamps come from its files' statistics in the Delta log (no data file is
read): a file belongs to the first commit whose timestamp is not before the file's modification time
(both on the committer's clock). Commit timestamps and stamps are only ever subtracted on their own
clock, so a skew between the service and the writers matters only beyond half a commit interval.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.coverage.table_truth import TableReader, TableTruthError
from zerobus_orchestration.reserved import EMIT_TS
from zerobus_orchestration.storage import reveal

# Operation metrics that count what a commit added: delta-rs's, then Databricks' (STREAMING UPDATE, WRITE).
_ADDED_METRICS = ("num_added_rows", "num_added_files", "numOutputRows", "numAddedFiles", "numFiles")
# Commits that add files only to rewrite rows already there (a replace's delete, maintenance).
_REWRITES = frozenset({"DELETE", "UPDATE", "MERGE", "OPTIMIZE", "RESTORE", "REORG"})
# The rows of the later commit were stamped within this fraction of the gap after the earlier's last.
_FLOWING = 0.5


def write_rhythm_s(reader: TableReader, *, commits: int) -> tuple[float, ...]:
    """Seconds between consecutive data commits among the table's last ``commits`` that rows kept
    flowing across (the module docstring), newest first; empty when none shows it (fewer than two data
    commits, files without ``_twg_emit_ts`` statistics, only runs with idle time between them).

    A data commit added rows (the service committing what it acknowledged); schema changes, property
    and comment updates and deletes are the catalog's or a replace's, not the service's rhythm.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
        history = table.history(limit=commits + 1)  # the oldest one only bounds the files of the next
        adds = pa.table(table.get_add_actions(flatten=True))
    except (DeltaError, OSError) as exc:
        raise TableTruthError(
            f"table {reader.table}: cannot read the Delta log's history at {reader.uri}: {exc}"
        ) from exc
    bounds = sorted({int(c["timestamp"]) for c in history if c.get("timestamp") is not None})
    # The oldest commit read only bounds the files of the next, unless it is the table's first.
    first_read = any(c.get("version") == 0 for c in history)
    floor = -1 if first_read else (bounds[0] if bounds else 0)
    data = sorted({int(c["timestamp"]) for c in history if c.get("timestamp") is not None and _adds_data(c)})
    data = [stamp for stamp in data if stamp > floor]
    flows = _flows(adds, bounds, floor)
    gaps = []
    for earlier, later in itertools.pairwise(data):
        gap_ms = later - earlier
        before, after = flows.get(earlier), flows.get(later)
        if gap_ms <= 0 or before is None or after is None:
            continue
        idle_us = after[0] - before[1]  # from the earlier commit's last stamp to the later's first
        if idle_us <= _FLOWING * gap_ms * 1000:
            gaps.append(gap_ms / 1000.0)
    return tuple(reversed(gaps))


def newest_commit(reader: TableReader) -> tuple[int, int | None]:
    """The table's latest version and its commit's timestamp (ms since the epoch, the committer's clock;
    None when the commit info carries none): one read of the Delta log, no data file.

    How recently anyone wrote the table: rows a writer had acknowledged can still be on their way to it
    only while its commits are recent (``runtime/settled_runs.py``).
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
        version = int(table.version())
        newest = table.history(limit=1)
    except (DeltaError, OSError) as exc:
        raise TableTruthError(
            f"table {reader.table}: cannot read the Delta log at {reader.uri}: {exc}"
        ) from exc
    stamp = newest[0].get("timestamp") if newest else None
    return version, None if stamp is None else int(stamp)


def _flows(adds: pa.Table, bounds: list[int], floor: int) -> dict[int, tuple[int, int]]:
    """Commit timestamp (ms) -> (earliest, latest) ``_twg_emit_ts`` (µs) of the rows it added, for the
    commits of ``bounds`` whose files (modified after ``floor``) carry the statistics. Files a later
    commit rewrote (a delete, OPTIMIZE) are gone from the snapshot: their commits show no flow."""
    low, high = f"min.{EMIT_TS}", f"max.{EMIT_TS}"
    if not bounds or low not in adds.column_names or high not in adds.column_names:
        return {}
    recent = adds.filter(pc.greater(adds["modification_time"], floor))
    flows: dict[int, tuple[int, int]] = {}
    for modified, first, last in zip(
        recent["modification_time"].to_pylist(),
        _micros(recent[low]).to_pylist(),
        _micros(recent[high]).to_pylist(),
        strict=True,
    ):
        at = bisect.bisect_left(bounds, modified)
        if first is None or last is None or at == len(bounds):
            continue  # no statistics, or written after the newest commit read (a commit under way)
        commit = bounds[at]
        seen = flows.get(commit)
        flows[commit] = (first, last) if seen is None else (min(seen[0], first), max(seen[1], last))
    return flows


def _micros(stamps: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps as integer microseconds, whatever unit the statistics were read back in."""
    return pc.cast(pc.cast(stamps, pa.timestamp("us", tz="UTC")), pa.int64())


def _adds_data(commit: Mapping[str, object]) -> bool:
    if str(commit.get("operation", "")).upper() in _REWRITES:
        return False
    metrics = commit.get("operationMetrics")
    if not isinstance(metrics, Mapping):
        return False  # metadata-only commits carry none
    for name in _ADDED_METRICS:
        value = metrics.get(name)
        if value is not None:
            try:
                return int(str(value)) > 0  # Databricks writes its metrics as strings
            except ValueError:
                return False
    return False
