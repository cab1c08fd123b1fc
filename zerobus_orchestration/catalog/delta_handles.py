"""Open Delta tables kept per process and brought up to date on each use, instead of re-opened.

Opening a ``DeltaTable`` replays its log from the last checkpoint (~12 ms of CPU at 30 versions, growing
with every commit until the next checkpoint), and the write path reads a primary-raw table on every write
(the precondition re-check, the reconcile). ``update_incremental`` reads only the commits made since the
handle's version, so a kept handle still sees every other process's changes (appends, schema changes,
property changes) at a fraction of the cost.

A table dropped and created again at the same location starts a new log whose versions say nothing
about the kept handle's: the handle remembers its log's first commit file (``0.json``, which holds the
table's id and is never rewritten) and is dropped when that file's content differs or is gone.
Only local tables without storage options are kept (an object store would cost a request per check).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from zerobus_orchestration.locations import is_local, local_path

if TYPE_CHECKING:
    from deltalake import DeltaTable

_FIRST_COMMIT = "_delta_log/" + "0" * 20 + ".json"
_SIZE = 64  # tables kept per process; more are re-opened (the oldest kept one is let go)


class _Kept:
    def __init__(self, table: DeltaTable, first_commit: bytes) -> None:
        self.table = table
        self.first_commit = first_commit
        self.lock = threading.Lock()  # a handle is brought up to date and read by one thread at a time


_kept: dict[str, _Kept] = {}
_kept_lock = threading.Lock()


def _first_commit(location: str) -> bytes | None:
    try:
        return (Path(local_path(location)) / _FIRST_COMMIT).read_bytes()
    except OSError:  # no such file: the table is gone, or its first commits were cleaned up
        return None


@contextmanager
def latest(
    location: str,
    open_table: Callable[[], DeltaTable],
    is_table: Callable[[], bool],
    *,
    cacheable: bool,
) -> Iterator[DeltaTable | None]:
    """The Delta table at ``location`` at its latest version (None: no table there), read in the block.

    ``open_table`` opens it afresh; ``is_table`` says whether there is a table at all (asked only when
    the first commit file does not already say so). ``cacheable``: the caller's storage options allow
    keeping the handle (``is_local`` is checked here too).
    """
    first = _first_commit(location) if cacheable and is_local(location) else None
    if first is None:
        yield open_table() if is_table() else None
        return
    with _kept_lock:
        kept = _kept.get(location)
    if kept is not None:
        with kept.lock:
            if kept.first_commit == first and _brought_up_to_date(kept.table):
                yield kept.table
                return
    table = open_table()
    fresh = _Kept(table, first)
    with _kept_lock:
        if len(_kept) >= _SIZE and location not in _kept:
            _kept.pop(next(iter(_kept)))
        _kept[location] = fresh
    with fresh.lock:
        yield table


def _brought_up_to_date(table: DeltaTable) -> bool:
    try:
        table.update_incremental()
    except Exception:  # not swallowed: the caller re-opens the table, which raises what still fails
        return False
    return True


def forget(location: str) -> None:
    """Let go of the handle kept for ``location`` (its table was deleted or replaced here)."""
    with _kept_lock:
        _kept.pop(location, None)
