"""Per-stream throughput throttle and per-table concurrent-stream limit (the documented Zerobus quotas)."""

from __future__ import annotations

import threading
import time
from collections import Counter


class Throttle:
    """Keeps one stream at or below ``mb_s`` megabytes per second (1 MB = 10^6 bytes) by sleeping."""

    def __init__(self, mb_s: float | None) -> None:
        self._bytes_per_s = None if mb_s is None else mb_s * 1_000_000
        self._start = time.monotonic()
        self._sent = 0

    def consume(self, nbytes: int) -> None:
        if self._bytes_per_s is None:
            return
        self._sent += nbytes
        ahead = self._sent / self._bytes_per_s - (time.monotonic() - self._start)
        if ahead > 0:
            time.sleep(ahead)


class StreamLimiter:
    """Counts open streams per table; ``acquire`` is refused above ``limit`` (None: unlimited)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()
        # Every stream ever accepted, so a test can prove a rotation or recovery really reconnected.
        self._opened: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.last_change = time.monotonic()  # when a stream last opened or closed (daemon idle clock)

    def acquire(self, table: str) -> bool:
        key = table.lower()
        with self._lock:
            if self.limit is not None and self._open[key] >= self.limit:
                return False
            self._open[key] += 1
            self._opened[key] += 1
            self.last_change = time.monotonic()
            return True

    def release(self, table: str) -> None:
        key = table.lower()
        with self._lock:
            self._open[key] -= 1
            if self._open[key] <= 0:
                del self._open[key]
            self.last_change = time.monotonic()

    def open_streams(self, table: str) -> int:
        with self._lock:
            return self._open[table.lower()]

    def opened_total(self, table: str) -> int:
        """Streams accepted on ``table`` so far, closed ones included."""
        with self._lock:
            return self._opened[table.lower()]

    def total_open(self) -> int:
        with self._lock:
            return sum(self._open.values())
