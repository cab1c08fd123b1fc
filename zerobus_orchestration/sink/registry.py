"""The documented per-process pool registry: one ``StreamPool`` per (transport, table, lane).

Sinks are short-lived (one per asset materialisation or task run); streams are not. Sinks built by
``ZerobusSink.open`` borrow their pool from here, so repeated runs in one process reuse the same
long-lived streams instead of opening new ones.
"""

from __future__ import annotations

import atexit
import logging
import threading

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageRecorder
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.pool import StreamPool
from zerobus_orchestration.transport.base import Transport

log = logging.getLogger(__name__)
_lock = threading.Lock()
_pools: dict[tuple[int, str, LaneKind], StreamPool] = {}


def pool_for(
    transport: Transport,
    table: str,
    config: PoolConfig | None = None,
    *,
    lane: LaneKind = LaneKind.RAW,
    recorder: CoverageRecorder | None = None,
    metrics: SinkMetrics | None = None,
) -> StreamPool:
    """The process's pool for ``table`` on ``transport``, created (not yet opened) on first use.

    ``config`` and ``metrics`` take effect only when the pool is created. A ``recorder`` other than the
    existing pool's is refused (``ValueError``): its ranges would never be recorded there.
    """
    key = (id(transport), table, lane)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.transport is not transport or pool.closing:
            pool = StreamPool(transport, table, config, lane=lane, recorder=recorder, metrics=metrics)
            _pools[key] = pool
        elif recorder is not None and pool.recorder is not recorder:
            # The pool's lanes confirm into the recorder it was built with; accepting another one here
            # would silently record this caller's coverage somewhere it never looks.
            raise ValueError(
                f"{table}: the process's {lane}-lane stream pool already records coverage into "
                f"{pool.recorder!r}, not the recorder passed now; fix: pass the same recorder on every "
                "open of this table, or build a StreamPool of your own for a separate recorder"
            )
        return pool


def close_all(timeout: float | None = 30.0) -> None:
    """Drain and close every registered pool (process exit, tests)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        try:
            pool.close(timeout)
        except Exception as exc:  # at exit, report every pool rather than stop at the first
            log.error("closing the stream pool of %s: %s", pool.table, exc)


atexit.register(close_all)
