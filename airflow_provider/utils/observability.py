"""What every task logs at its end: the sink's health snapshot and a metric summary, secrets removed.

The health snapshot is the runtime's plain value (per-stream liveness, backpressure, totals, latency
percentiles); the summary picks the numbers a runbook starts from: rows, bytes, coalesce ratio,
delivery latency, stream rebuilds and concurrency rejects. Anything whose key looks like a credential is
masked before it reaches a log line or XCom, whatever the runtime puts into its snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

_SECRET_MARKERS = ("secret", "token", "password", "credential", "authorization", "private_key")
MASK = "***"

# Counters summed over every pool of the runtime's health snapshot.
_POOL_COUNTERS = (
    "submitted",
    "delivered",
    "pending",
    "rows_delivered",
    "failed_batches",
    "rebuilds",
    "concurrency_rejects",
    "ack_retries",
    "poisoned",
    "recoveries",
    "rows_possibly_resent",
)
# Per-pool percentiles: the summary keeps the worst pool's value.
_POOL_WORST = ("delivery_latency_p50_s", "delivery_latency_p99_s")
_RESULT_KEYS = (
    "rows_written",
    "rows_skipped",
    "bytes_written",
    "payload_bytes",
    "payload_mb_per_s",
    "stamped_mb_per_s",
    "coalesce_ratio_p50",
    "delivery_latency_p50_s",
    "delivery_latency_p99_s",
    "streams_used",
    "delta_version",
    "duration_s",
    "rows_possibly_resent",
)


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(value: Any) -> Any:
    """``value`` as JSON-safe data with every credential-looking key masked."""
    if isinstance(value, Mapping):
        return {str(k): MASK if _is_secret_key(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "get_secret_value"):  # a SecretStr that slipped through under an innocent key
        return MASK
    return str(value)


def metric_summary(
    health: Mapping[str, Any], result: Mapping[str, Any] | None = None, *, tables: Sequence[str] = ()
) -> dict[str, Any]:
    """The runbook numbers from a health snapshot (and the task's write result, when it wrote).

    Counters are summed over the snapshot's ``pools`` (only those of ``tables`` when given: one process
    may serve several tasks, as in ``dag.test()``); latencies keep the worst pool; the coalesce ratio
    is the lowest pool's (the one whose acks coalesce least).
    """
    pools = [p for p in health.get("pools") or () if isinstance(p, Mapping)]
    if tables:
        wanted = {t.lower() for t in tables}
        pools = [p for p in pools if str(p.get("table", "")).lower() in wanted]
    summary: dict[str, Any] = {"pools": len(pools), "healthy": health.get("healthy")}
    for key in _POOL_COUNTERS:
        values = [p[key] for p in pools if isinstance(p.get(key), int | float)]
        if values:
            summary[key] = sum(values)
    for key in _POOL_WORST:
        values = [p[key] for p in pools if isinstance(p.get(key), int | float)]
        if values:
            summary[key] = max(values)
    ratios = [p["coalesce_ratio_p50"] for p in pools if isinstance(p.get("coalesce_ratio_p50"), int | float)]
    if ratios:
        summary["coalesce_ratio_p50"] = min(ratios)
    for key in _RESULT_KEYS:
        if result is not None and result.get(key) is not None:
            summary[key] = result[key]
    return redact(summary)  # type: ignore[no-any-return]


def log_sink_report(
    logger: logging.Logger | Any,
    health: Mapping[str, Any] | None,
    result: Mapping[str, Any] | None = None,
    *,
    tables: Sequence[str] = (),
    task: str = "",
) -> dict[str, Any]:
    """Log the metric summary and the health snapshot (one JSON line each); returns the summary."""
    summary = metric_summary(health or {}, result, tables=tables)
    prefix = f"{task}: " if task else ""
    logger.info("%szerobus metrics %s", prefix, json.dumps(summary, sort_keys=True, default=str))
    if health is not None:
        logger.info("%szerobus health %s", prefix, json.dumps(redact(health), sort_keys=True, default=str))
    return summary
