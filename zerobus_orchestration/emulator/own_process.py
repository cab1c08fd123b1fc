"""Process-wide settings for an emulator that runs in its own process (``serve``, the shared daemon).

Only the emulator's own entry points apply them: an embedded emulator shares a step's process, whose
allocator and garbage collector are not the emulator's to retune.

* The allocator keeps freed memory. Every Flight frame (~2 MiB) is received, decoded and logged in
  fresh buffers of that size, and glibc by default hands freed memory of that size back to the kernel
  (an arena's free top above ``M_TRIM_THRESHOLD``, adapted to the largest freed block), so the next
  frame's buffers are zero-filled pages faulted in again (a measurable share of the emulator's CPU in
  a burst). With trimming off and the mmap threshold fixed at its maximum the buffers are reused; the
  process keeps its peak heap instead of returning it.
* Table work yields the cores to acknowledging. Delta's Parquet encoding and commits run on the Delta
  library's worker threads (tokio's, ``tokio-*``), and in a burst a materialiser period's encoding
  competed with the gRPC handlers for the same cores: writing into the WAL and acknowledging waited
  behind Parquet. Zerobus runs the two on separate machinery, so here those threads run at a lower
  priority (nice +10 over the process's): when the cores are free they run at full speed, in a burst
  the acknowledgements come first and the Delta commit a little later (measured with
  benchmarks/scaling.py: docs/performance.md).
* The garbage collector skips the startup heap. The modules loaded by then (Delta, Arrow, grpc,
  pydantic, the Iceberg mirror) are ~160k tracked objects that live as long as the process, and every
  full collection walked them all. ``gc.freeze`` leaves them out of later collections.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps M_MMAP_THRESHOLD at HEAP_MAX_SIZE / 2 (32 MiB on 64-bit): blocks larger than that are
# still mapped and unmapped on their own, and Flight frames are far smaller (the SDK's calls are
# at most 10 MiB).
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_NO_TRIM = 2**31 - 1  # an int for mallopt; larger than any heap top this process frees


def keep_freed_memory() -> bool:
    """Turn glibc's trimming of freed memory off; False (nothing changed) on another C library."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator's defaults stay
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES), (_M_TRIM_THRESHOLD, _NO_TRIM))
    ok = all([int(mallopt(param, value)) == 1 for param, value in settings])  # each one applied
    if not ok:
        log.debug("mallopt refused the emulator's allocator settings; glibc defaults stay")
    return ok


def freeze_startup_heap() -> None:
    """Leave every object alive now out of later collections (call once the emulator is serving)."""
    gc.collect()
    gc.freeze()


# Lower the Delta library's threads by this much (nice values are per thread on Linux).
TABLE_WORK_NICE_INCREMENT = 10
# tokio's thread names: "tokio-runtime-w(orker)" (its default, cut to 15 characters), "tokio-rt-worker".
_TABLE_WORK_THREADS = "tokio-"
_SWEEP_S = 1.0  # the library starts blocking-pool threads on demand and ends idle ones
_TASKS = Path("/proc/self/task")


class TableWorkYield:
    """Keeps the Delta library's threads at a lower priority than the rest of this process (Linux)."""

    def __init__(self, increment: int = TABLE_WORK_NICE_INCREMENT) -> None:
        # The process's own nice value (a service started under ``nice`` keeps its place); at most 19.
        self.nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment)
        self._seen: set[int] = set()

    def sweep(self) -> int:
        """Lower every table-work thread started since the last sweep; how many were lowered."""
        try:
            tids = {int(name) for name in os.listdir(_TASKS)}
        except OSError:
            return 0
        self._seen &= tids  # a thread id may be reused once its thread ended
        lowered = 0
        for tid in tids - self._seen:
            self._seen.add(tid)
            try:
                name = (_TASKS / str(tid) / "comm").read_text(encoding="utf-8").strip()
                if name.startswith(_TABLE_WORK_THREADS) and os.getpriority(os.PRIO_PROCESS, tid) < self.nice:
                    os.setpriority(os.PRIO_PROCESS, tid, self.nice)
                    lowered += 1
            except OSError:  # the thread ended meanwhile, or the system refuses: it keeps its priority
                continue
        return lowered


def yield_table_work() -> threading.Thread | None:
    """Lower the Delta library's threads now and as they start (a daemon thread); None off Linux."""
    if not _TASKS.is_dir():
        return None
    keeper = TableWorkYield()

    def run() -> None:
        while True:
            keeper.sweep()
            time.sleep(_SWEEP_S)

    thread = threading.Thread(target=run, name="zerobus-emulator-table-work-yield", daemon=True)
    thread.start()
    return thread
