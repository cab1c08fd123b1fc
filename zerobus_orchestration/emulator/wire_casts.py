"""Counts of the per-batch casts the emulator applies where the Arrow Flight server casts too.

The server accepts two schemas that are not its own and casts every batch of such a stream
(``schema_check.CAST_MAP_KEY_VALUE``, ``schema_check.CAST_VARIANT_MARKER``; sources in
docs/adr/0003-emulator-fidelity-limits.md). The emulator does the same and counts each cast batch here,
per table and kind, so a test (or an operator reading ``Emulator.wire_casts``) sees a producer paying for
it instead of sending the canonical schema.
"""

from __future__ import annotations

import threading
from collections import Counter


class WireCasts:
    """Thread-safe counts of cast batches by (table, kind)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, table: str, kinds: tuple[str, ...]) -> None:
        with self._lock:
            for kind in kinds:
                self._counts[(table, kind)] += 1

    def of(self, table: str) -> dict[str, int]:
        """Batches cast on ``table`` since start, by kind (empty: none)."""
        with self._lock:
            return {kind: n for (name, kind), n in self._counts.items() if name == table}
