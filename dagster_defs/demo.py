"""The Dagster flavour of ``zerobus-orch demo``: the quickstart (``dagster_defs.quickstart``) in process.

Steps: contract asset (catalog reconcile) -> blocking primary-raw checks -> ``raw/orders`` streamed through
the IO manager (returns once durable) -> the read-back sensor ticked through ``dg.build_sensor_context``
until Iceberg shows every row -> the derived ``analytics/daily_order_totals`` computed from the read-back.

Every number returned is measured: rows and throughput from the write's metadata, checks from the
check evaluations, ``iceberg_lag_s`` from the durable write to the sensor's first verified tick.
The runtime is left open (the caller owns the process; ``close_all_runtimes`` or exit closes it).

The core finds ``run_dagster_demo`` through the ``zerobus_orchestration.demos`` entry point that
pyproject.toml registers, so the core never imports this adapter.
"""

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import dagster as dg

from dagster_defs.io_manager import ZerobusIOManager
from dagster_defs.metadata import metadata_value
from dagster_defs.resource import ZerobusResource
from dagster_defs.sensors import build_readback_sensor
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.retry import Backoff, poll_until

Progress = Callable[[str], None]
# The demo reports its own progress; Dagster's per-event DEBUG lines would bury it.
_QUIET = {"console": {"config": {"log_level": "WARNING"}}}


def load_quickstart() -> ModuleType:
    """The quickstart module (``dagster_defs.quickstart``, shipped in the wheel)."""
    from dagster_defs import quickstart

    return quickstart


def _metadata(result: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    events = result.asset_materializations_for_node(node)
    if not events:
        return {}
    return {k: metadata_value(events[-1].metadata, k) for k in events[-1].metadata}


def _wait_for_readback(
    sensor: dg.SensorDefinition,
    instance: dg.DagsterInstance,
    resource: ZerobusResource,
    *,
    deadline_s: float,
    poll_s: float,
    say: Progress,
) -> tuple[dict[str, Any] | None, int]:
    """Tick the sensor until it reports a verified read-back; (observation metadata, ticks)."""
    cursor: str | None = None
    ticks = 0

    def tick() -> dict[str, Any] | None:
        nonlocal cursor, ticks
        ticks += 1
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources={"zerobus": resource}
        ) as ctx:
            outcome = sensor(ctx)
        if isinstance(outcome, dg.SensorResult):
            cursor = outcome.cursor or cursor
            for event in outcome.asset_events or []:
                if isinstance(event, dg.AssetObservation):
                    return {k: metadata_value(event.metadata, k) for k in event.metadata}
        elif isinstance(outcome, dg.SkipReason) and ticks == 1:
            say(f"read-back sensor: {outcome.skip_message}")
        return None

    observed = poll_until(tick, timeout_s=deadline_s, backoff=Backoff(poll_s, poll_s, multiplier=1.0))
    return observed, ticks


def run_dagster_demo(cfg: ZerobusConfig, rows: int, progress: Progress | None = None) -> dict[str, Any]:
    """Materialise the quickstart in process with ``rows`` orders and verify them through Iceberg."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    say: Progress = progress or (lambda _message: None)
    qs = load_quickstart()
    resource = ZerobusResource.from_config(cfg)
    resources = {"zerobus": resource, "io_manager": ZerobusIOManager(zerobus=resource, catalog="main")}
    instance = dg.DagsterInstance.ephemeral()
    orders_node = qs.ORDERS_KEY.to_python_identifier()

    say(f"dagster: reconciling {qs.orders_contract.table}, running its checks, streaming {rows:,} orders")
    started = time.monotonic()
    raw = dg.materialize(
        [*qs.orders_contract.definitions, qs.orders],
        resources=resources,
        instance=instance,
        run_config={"ops": {orders_node: {"config": {"rows": rows}}}, "loggers": _QUIET},
        raise_on_error=False,
    )
    durable_at = time.monotonic()
    evaluations = raw.get_asset_check_evaluations()
    checks_passed = sum(1 for e in evaluations if e.passed)
    written = _metadata(raw, orders_node)
    say(
        f"dagster: run {'succeeded' if raw.success else 'FAILED'} in {durable_at - started:.1f}s; "
        f"checks {checks_passed}/{len(evaluations)} passed; "
        f"rows durable: {written.get('zerobus/rows_written', 0):,}"
    )

    report: dict[str, Any] | None = None
    ticks = 0
    if raw.success:
        sensor = build_readback_sensor([qs.ORDERS_KEY], minimum_interval_seconds=1)
        report, ticks = _wait_for_readback(
            sensor,
            instance,
            resource,
            deadline_s=cfg.readback.wait_timeout_s,
            poll_s=cfg.readback.poll_initial_s,
            say=say,
        )
    verified_at = time.monotonic()
    verified = bool(report and report.get("readback/verified"))
    say(f"dagster: read-back {'verified' if verified else 'NOT verified'} after {ticks} sensor tick(s)")

    derived: dict[str, Any] = {}
    derived_ok = False
    if verified:
        totals_node = qs.DAILY_TOTALS_KEY.to_python_identifier()
        derived_run = dg.materialize(
            [qs.orders, qs.daily_order_totals],
            selection=[qs.DAILY_TOTALS_KEY],
            resources=resources,
            instance=instance,
            run_config={"loggers": _QUIET},
            raise_on_error=False,
        )
        derived_ok = bool(derived_run.success)
        derived = _metadata(derived_run, totals_node) if derived_ok else {}
        name = derived.get("dagster/table_name", "the derived table")
        say(f"dagster: {name}: {derived.get('dagster/row_count')} rows")

    return {
        # The derived step reads the orders back through the IO manager: its failure fails the demo too.
        "success": bool(raw.success and verified and derived_ok),
        "table": qs.orders_contract.table,
        "rows_requested": rows,
        "rows_written": int(written.get("zerobus/rows_written", 0)),
        "rows_read_back": int(report.get("readback/rows_scanned", 0)) if report else 0,
        "verified": verified,
        "write_s": round(float(written.get("zerobus/duration_s", 0.0)), 3),
        "payload_mb_per_s": written.get("zerobus/payload_mb_per_s"),
        "mb_per_s": written.get("zerobus/mb_per_s"),
        "streams": written.get("zerobus/streams_used"),
        "coalesce_ratio_p50": written.get("zerobus/coalesce_ratio_p50"),
        "delivery_latency_p50_s": written.get("zerobus/delivery_latency_p50_s"),
        "delivery_latency_p99_s": written.get("zerobus/delivery_latency_p99_s"),
        "iceberg_lag_s": round(verified_at - durable_at, 3) if verified else None,
        "sensor_ticks": ticks,
        "checks_passed": checks_passed,
        "checks_total": len(evaluations),
        "derived_table": derived.get("dagster/table_name"),
        "derived_rows": derived.get("dagster/row_count"),
    }
