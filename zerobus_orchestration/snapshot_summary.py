"""Keys of an Iceberg snapshot summary that tie the snapshot to the Delta commit it mirrors.

Written by the emulator's Iceberg mirror for every converted snapshot and read by read-back's
snapshot-summary probe: one definition, so writer and reader cannot drift apart.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DELTA_TIMESTAMP_KEY", "DELTA_VERSION_KEY"]

DELTA_VERSION_KEY: Final = "delta-version"  # the Delta table version the snapshot reflects
DELTA_TIMESTAMP_KEY: Final = "delta-timestamp"  # that Delta commit's timestamp (epoch milliseconds)
