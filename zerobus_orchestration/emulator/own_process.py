"""Process-wide settings for an emulator that runs in its own process (``serve``, the shared daemon).

Only the emulator's own entry points apply them: an embedded emulator shares a step's process, whose
allocator and garbage collector are not the emulator's to retune.

* The allocator keeps freed memory. Every Flight frame (~2 MiB) is received, decoded and logged in
  fresh buffers of that size, and glibc by default hands freed memory of that size back to the kernel
  (an arena's free top above ``M_TRIM_THRESHOLD``, adapted to the largest freed block), so the next
  frame's buffers are zero-filled pages faulted in again: page faults were ~15 % of the emulator's CPU
  samples in a 4-stream burst (benchmarks/scaling.py's workload, perf). With trimming off and the
  mmap threshold fixed at its maximum the buffers are reused (minor faults per GB: ~410k -> ~280k);
  the process keeps its peak heap instead of returning it.
* The garbage collector skips the startup heap. The modules loaded by then (Delta, Arrow, grpc,
  pydantic, the Iceberg mirror) are ~160k tracked objects that live as long as the process, and every
  full collection walked them all: ~5 % of the emulator's CPU samples in the same burst. ``gc.freeze``
  leaves them out of later collections.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

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
