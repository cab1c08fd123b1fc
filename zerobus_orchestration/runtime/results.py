"""What the runtime reports: one write's measured result, and the health of every pool of a process.

Plain values (``as_dict`` for Dagster metadata, Airflow XCom and logs); ``runtime/facade.py`` re-exports both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from zerobus_orchestration.sink.health import PoolHealth


@dataclass(frozen=True)
class WriteResult:
    """What one ``write`` delivered, measured (never assumed).

    Two byte counts, both Arrow in-memory sizes of the rows this write sent (skipped rows count in
    neither): ``payload_bytes`` is the caller's own data; ``bytes_written`` is what was sent, stamped:
    the payload as conformed to the table's wire types plus the three reserved ``_twg_*`` columns (on
    narrow rows twice the payload or more). A throughput of the user's data divides ``payload_bytes``.
    """

    table: str
    source: str
    partition: str
    rows_written: int
    rows_skipped: int
    bytes_written: int
    payload_bytes: int
    offset_start: int
    offset_end: int
    streams_used: int
    coalesce_ratio_p50: float | None
    delivery_latency_p50_s: float | None
    delivery_latency_p99_s: float | None
    delta_version: int | None
    duration_s: float
    rows_possibly_resent: int = 0
    """Rows the SDK replayed when it reconnected a stream during this write (lack-of-ack timeout,
    rotation): they may be in the table twice. An upper bound; read-back counts the actual duplicates."""
    rows_resent_after_crash: int = 0
    """Rows a resumed write sent at positions an earlier attempt had already reached (below the highest
    position the coverage cache or the table showed delivered, or an earlier resumed attempt on this
    host handed to its sink: ``resume.pieces.HandedOut``): holes an interrupted try left, and its last
    rows still on their way to the table. They were neither recorded nor visible when this write looked;
    one that was durable but not yet visible is in the table twice. An upper bound (never under-counts
    on the host of the earlier attempt); read-back counts the duplicates."""
    superseded_sources: tuple[str, ...] = ()
    """``replace`` writes: the ``_twg_source`` tags of the earlier runs of this partition whose rows this
    write deleted once its own rows were visible: the runs older than it (``runtime/supersede.py``)."""
    source_tag: str = ""
    """The ``_twg_source`` value of this write's rows (``write_modes.source_tag(source, partition)``)."""
    logical_partition: str = ""
    """The logical partition ``partition`` is a run of (``write_modes.PartitionRun``)."""
    already_delivered: bool = False
    """Nothing had to be sent: the table already held this input, as the rows of run ``delivered_by``
    (an earlier run of the partition with the same content, or this run's earlier attempt)."""
    delivered_by: str | None = None
    """The ``_twg_source`` tag of the rows that hold this input in the table (None: the input had no row)."""
    run_order_version: int | None = None
    """``replace`` writes: the Delta version at which this run's rows became visible, its place in the
    order of its partition's runs that every host reads from the table (None: no rows, or ``append``)."""

    @property
    def payload_mb_per_s(self) -> float | None:
        """The caller's data over the write's duration, in MB/s (MB = 10^6 bytes); None if instant."""
        return _mb_per_s(self.payload_bytes, self.duration_s)

    @property
    def stamped_mb_per_s(self) -> float | None:
        """Stamped bytes (``bytes_written``) over the write's duration, in MB/s (MB = 10^6 bytes)."""
        return _mb_per_s(self.bytes_written, self.duration_s)

    def as_dict(self) -> dict[str, Any]:
        """The fields, plus both rates (``payload_mb_per_s``, ``stamped_mb_per_s``)."""
        return {
            **asdict(self),
            "payload_mb_per_s": self.payload_mb_per_s,
            "stamped_mb_per_s": self.stamped_mb_per_s,
        }


def _mb_per_s(nbytes: int, duration_s: float) -> float | None:
    return round(nbytes / 1e6 / duration_s, 3) if duration_s > 0 else None


@dataclass(frozen=True)
class RuntimeHealth:
    """Every pool's ``PoolHealth``; what Dagster metadata and Airflow task logs render."""

    embedded: bool
    endpoint: str | None
    pools: tuple[PoolHealth, ...]
    rows_resent_after_crash: int = 0
    """Over every write of this runtime: see ``WriteResult.rows_resent_after_crash``."""

    @property
    def healthy(self) -> bool:
        return all(pool.healthy or pool.submitted == 0 for pool in self.pools)

    def as_dict(self) -> dict[str, Any]:
        return {
            "embedded": self.embedded,
            "endpoint": self.endpoint,
            "healthy": self.healthy,
            "rows_resent_after_crash": self.rows_resent_after_crash,
            "pools": [pool.as_dict() for pool in self.pools],
        }
