"""Read-back sensor: confirm through Iceberg that what each materialisation delivered is visible.

Per tick, for every monitored asset, the materialisations after the cursor are taken in order. Each one
is the write's own record (``zerobus/table``, ``zerobus/source``, ``zerobus/partition`` and the delivered
offsets, metadata written by the IO manager), so the sensor verifies those ranges wherever it runs: the
daemon's pod needs no file of the run worker's. One non-blocking attempt per materialisation through the
core's read-only ``ReadbackService`` (no write runtime, no stream pool), whose ``ReadbackStatus``
(decided in the core, not here) says what to do:

- not visible yet (Iceberg metadata lags the Delta commit): the asset's cursor stays where it is, so the
  next tick tries again; the tick returns ``SkipReason`` naming what it waits for;
- visible: an ``AssetObservation`` with the verification report (and an ``AssetCheckEvaluation`` when
  ``check_name`` is set), and the cursor moves past that materialisation;
- visible, but covered rows missing from the snapshot: they may still be committing (Zerobus commits
  acknowledged rows asynchronously), so the cursor waits until ``max_lag_s``; after that the report is
  emitted as a failed verification (no recovery run: coverage already holds those rows) and the cursor
  moves on;
- lost (delivered rows missing that the table's Delta log shows deleted after delivery, or held at the
  snapshot's version) or duplicated (every row there, some twice): a failed verification at once, naming
  the rows (a duplicated write gets no recovery run: re-sending would add copies; ``zerobus-orch repair
  --dedupe`` removes them), and the cursor moves on;
- nothing to verify (no delivered coverage): waiting cannot create coverage, so the cursor moves on.
  A materialisation that wrote 0 rows gets an observation with ``readback/rows_scanned = 0`` and
  ``readback/nothing_to_verify`` (and a passed check); one that reports rows but has no coverage gets a
  failed verification naming the likely cause (sensor and IO manager on different warehouses);
- still invisible after ``max_lag_s``: one ``RunRequest`` per materialisation (``run_key`` dedupes) for
  recovery, tagged ``zerobus/recovery`` plus ``zerobus/resume_source`` / ``zerobus/resume_partition``
  naming the original write's coverage: the recovery run resumes that coverage (sending only rows it
  does not hold, none after a complete write) instead of appending a second copy; the cursor still
  waits for the rows.

A tick that judged something says what in its skip reason (Dagster shows a tick without runs as
skipped; "Sensor function returned an empty result" would hide what was verified).

The sensor never raises to retry (a raised tick is a failure and loses nothing but also saves nothing):
a failed read-back (``UNAVAILABLE`` or ``FAILED``) is reported in the skip reason and retried next tick,
since the cursor must not move past a write nobody verified; a ``FAILED`` one says a fix is needed.
"""

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from dagster_defs.metadata import KEY_PARTITION, KEY_SOURCE, KEY_TABLE, metadata_value, report_metadata
from dagster_defs.naming import META_WRITE_MODE, RESUME_PARTITION_TAG, RESUME_SOURCE_TAG
from dagster_defs.resource import ZerobusResource
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.record import WriteRecord
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
from zerobus_orchestration.write_modes import WriteMode, logical_partition

RECOVERY_TAG = "zerobus/recovery"


@dataclass
class AssetCursor:
    """Per asset: the last materialisation judged, and the last one a recovery run was requested for."""

    verified: int = -1
    recovery: int = -1


@dataclass
class ReadbackCursor:
    assets: dict[str, AssetCursor] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> "ReadbackCursor":
        """Tolerant: an unreadable cursor starts over (re-verifying is harmless; raising is not)."""
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        assets: dict[str, AssetCursor] = {}
        for key, value in data.items():
            if isinstance(value, dict):
                assets[str(key)] = AssetCursor(int(value.get("verified", -1)), int(value.get("recovery", -1)))
            elif isinstance(value, int):  # the plain {asset: storage_id} form
                assets[str(key)] = AssetCursor(verified=value)
        return cls(assets)

    def dumps(self) -> str:
        data = {k: {"verified": v.verified, "recovery": v.recovery} for k, v in sorted(self.assets.items())}
        return json.dumps(data, sort_keys=True)

    def of(self, asset: str) -> AssetCursor:
        return self.assets.setdefault(asset, AssetCursor())


@dataclass(frozen=True)
class WriteTarget:
    """The coverage one materialisation delivered, from its ``zerobus/*`` metadata."""

    table: str
    source: str
    partition: str
    ranges: tuple[OffsetRange, ...] | None = None  # the write's record; None: the core looks elsewhere
    replaces: str | None = None  # a replace write: the logical partition whose other runs must be gone

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> "WriteTarget | None":
        values = [metadata_value(metadata, k) for k in (KEY_TABLE, KEY_SOURCE, KEY_PARTITION)]
        if not all(isinstance(v, str) for v in values[:2]) or not isinstance(values[2], str):
            return None  # not written through the Zerobus IO manager (e.g. a contract asset)
        summary = {
            "table": values[0],
            "source": values[1],
            "partition": values[2],
            **{key: metadata_value(metadata, f"zerobus/{key}") for key in _RECORD_KEYS},
        }
        record = WriteRecord.from_summary(summary)
        replaced = metadata_value(metadata, META_WRITE_MODE) == WriteMode.REPLACE.value
        return cls(
            str(values[0]),
            str(values[1]),
            str(values[2]),
            None if record is None else record.ranges,
            logical_partition(str(values[2])) if replaced else None,
        )


# The write summary's keys the IO manager records as ``zerobus/<key>``: what the write delivered.
_RECORD_KEYS = ("offset_start", "offset_end", "rows_written", "rows_skipped", "delivered_ranges")


def recovery_run_key(asset: str, storage_id: int) -> str:
    return f"zerobus-readback-recovery:{asset}:{storage_id}"


def delivered_rows(metadata: Mapping[str, Any]) -> int | None:
    """Rows a materialisation delivered (written now or by an earlier attempt); ``None`` when unknown."""
    written = metadata_value(metadata, "zerobus/rows_written")
    if isinstance(written, int):
        skipped = metadata_value(metadata, "zerobus/rows_skipped")
        return written + (skipped if isinstance(skipped, int) else 0)
    counted = metadata_value(metadata, "dagster/row_count")  # an asset that wrote through the resource
    return counted if isinstance(counted, int) else None


def nothing_to_verify_verdict(target: WriteTarget, metadata: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, why) when read-back found no coverage: fine for an empty write, a fault otherwise."""
    rows = delivered_rows(metadata)
    if rows == 0:
        return True, f"{target.table}: the write delivered 0 rows; nothing to verify"
    return False, (
        f"{target.table}: no delivered coverage for source {target.source!r} partition "
        f"{target.partition!r}, although the materialisation reports {rows if rows is not None else 'some'} "
        "row(s): the sensor's zerobus resource must use the same warehouse/config as the IO manager"
    )


def _unverifiable_events(
    key: dg.AssetKey,
    target: WriteTarget,
    verdict: tuple[bool, str],
    lag_s: float,
    storage_id: int,
    check_name: str | None,
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    passed, why = verdict
    judged = {
        "readback/verified": passed,
        "readback/nothing_to_verify": True,
        "readback/rows_scanned": 0,
        "readback/detail": why,
    }
    return _readback_events(key, target, judged, passed, why, lag_s, storage_id, check_name)


def _readback_events(
    key: dg.AssetKey,
    target: WriteTarget,
    judged: Mapping[str, Any],
    passed: bool,
    description: str,
    lag_s: float,
    storage_id: int,
    check_name: str | None,
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """The observation (and check evaluation, if ``check_name``) recording one judged materialisation."""
    metadata: dict[str, Any] = {
        **judged,
        "readback/lag_s": round(lag_s, 3),
        "readback/materialization_storage_id": storage_id,
        KEY_TABLE: target.table,
        KEY_SOURCE: target.source,
        KEY_PARTITION: target.partition,
    }
    events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = [
        dg.AssetObservation(asset_key=key, metadata=metadata)
    ]
    if check_name is not None:
        events.append(
            dg.AssetCheckEvaluation(
                asset_key=key,
                check_name=check_name,
                passed=passed,
                metadata=metadata,
                description=description,
            )
        )
    return events


@dataclass
class TickOutcome:
    events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = field(default_factory=list)
    run_requests: list[dg.RunRequest] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    judged: list[str] = field(default_factory=list)  # one line per materialisation judged this tick


@dataclass(frozen=True)
class ReadbackSensorSettings:
    assets: tuple[dg.AssetKey, ...]
    resource_key: str
    max_lag_s: float
    check_name: str | None
    request_recovery: bool
    batch_limit: int


def _events_for(
    key: dg.AssetKey,
    target: WriteTarget,
    outcome: ReadbackOutcome,
    lag_s: float,
    storage_id: int,
    check_name: str | None,
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    verified = outcome.status.is_successful
    description = f"{target.table}: rows of {target.partition} " + (
        "visible and verified through Iceberg" if verified else "NOT all visible through Iceberg"
    )
    if outcome.status in (ReadbackStatus.LOST, ReadbackStatus.DUPLICATED):
        description = outcome.message  # names the rows and the fix
    metadata = report_metadata(outcome.report or {})
    return _readback_events(key, target, metadata, verified, description, lag_s, storage_id, check_name)


def _attempt(zerobus: ZerobusResource, target: WriteTarget) -> ReadbackOutcome:
    """One judged, read-only attempt; a config that builds no read-back service is judged the same way."""
    from zerobus_orchestration.readback.judge import outcome_of_error
    from zerobus_orchestration.runtime.registry import readback_service

    try:
        service = readback_service(zerobus.zerobus_config())
    except Exception as exc:  # judged by the core, reported in the skip reason: never fail the tick
        return outcome_of_error(exc, target.table)
    return service.verify_once(
        target.table,
        source=target.source,
        partition=target.partition,
        ranges=target.ranges,
        replaces=target.replaces,
    )


def _judged_line(name: str, target: WriteTarget, outcome: ReadbackOutcome) -> str:
    """One skip-reason line for a judged materialisation: what was verified and what it found."""
    report = outcome.report or {}
    if outcome.status is ReadbackStatus.VERIFIED:
        return (
            f"{name}: verified {report.get('expected_rows', '?')} delivered row(s) of {target.table} "
            f"(source {target.source!r}, partition {target.partition!r}) through Iceberg, "
            f"{outcome.duplicate_count} duplicate(s)"
        )
    return f"{name}: NOT verified: {outcome.message}"


Verify = Callable[[WriteTarget], ReadbackOutcome]
"""One judged read-back attempt for one materialisation's record (the sensor's: ``_attempt``)."""


def evaluate_tick(
    instance: dg.DagsterInstance,
    verify: Verify,
    settings: ReadbackSensorSettings,
    cursor: ReadbackCursor,
    *,
    now: float | None = None,
) -> TickOutcome:
    """One sensor tick over ``settings.assets``; mutates ``cursor`` only past judged materialisations."""
    tick = TickOutcome()
    at = time.time() if now is None else now
    for key in settings.assets:
        name = key.to_user_string()
        state = cursor.of(name)
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=key, after_storage_id=state.verified if state.verified >= 0 else None
            ),
            limit=settings.batch_limit,
            ascending=True,
        ).records
        for record in records:
            materialization = record.asset_materialization
            target = WriteTarget.from_metadata(materialization.metadata if materialization else {})
            if target is None:
                state.verified = record.storage_id
                continue
            lag_s = max(0.0, at - record.timestamp)
            outcome = verify(target)
            if outcome.status is ReadbackStatus.NOTHING_TO_VERIFY:
                # Coverage precedes the materialisation event (handle_output returns once durable),
                # so a later tick cannot find more: judge it now and move past it.
                verdict = nothing_to_verify_verdict(
                    target, materialization.metadata if materialization else {}
                )
                tick.events.extend(
                    _unverifiable_events(key, target, verdict, lag_s, record.storage_id, settings.check_name)
                )
                tick.judged.append(f"{name}: {verdict[1]}")
                state.verified = record.storage_id
                continue
            if outcome.status in (ReadbackStatus.UNAVAILABLE, ReadbackStatus.FAILED):
                # Report and retry next tick; never fail the tick, never move past an unverified write.
                fix = "; fix needed" if outcome.status is ReadbackStatus.FAILED else ""
                tick.waiting.append(f"{name}: read-back failed ({outcome.message}){fix}; retrying")
                break
            if outcome.status is ReadbackStatus.NOT_VISIBLE_YET:
                tick.waiting.append(f"{name}: {target.table} not visible in Iceberg yet ({lag_s:.1f}s)")
                if (
                    settings.request_recovery
                    and lag_s > settings.max_lag_s
                    and state.recovery < record.storage_id
                ):
                    tick.run_requests.append(
                        dg.RunRequest(
                            run_key=recovery_run_key(name, record.storage_id),
                            asset_selection=[key],
                            partition_key=record.partition_key,
                            tags={
                                RECOVERY_TAG: "true",
                                "zerobus/table": target.table,
                                # Resume the original write's coverage: a fresh run id would append
                                # every row again next to the durable ones Iceberg has yet to show.
                                RESUME_SOURCE_TAG: target.source,
                                RESUME_PARTITION_TAG: target.partition,
                            },
                        )
                    )
                    state.recovery = record.storage_id
                break  # later materialisations of this asset wait behind this one
            if outcome.status is ReadbackStatus.INCOMPLETE and lag_s <= settings.max_lag_s:
                # Covered rows not all in the snapshot yet: Zerobus commits acknowledged rows
                # asynchronously, so wait for them until max_lag_s before judging the write.
                tick.waiting.append(
                    f"{name}: {outcome.missing_rows} delivered row(s) of {target.table} not visible yet "
                    f"({lag_s:.1f}s)"
                )
                break
            tick.events.extend(
                _events_for(key, target, outcome, lag_s, record.storage_id, settings.check_name)
            )
            tick.judged.append(_judged_line(name, target, outcome))
            state.verified = record.storage_id
    return tick


def build_readback_sensor(
    assets: Sequence[dg.AssetKey | str | Sequence[str]],
    *,
    name: str = "zerobus_readback",
    resource_key: str = "zerobus",
    max_lag_s: float = 900.0,
    check_name: str | None = None,
    request_recovery: bool = True,
    minimum_interval_seconds: int = 30,
    batch_limit: int = 25,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor verifying through Iceberg what the Zerobus IO manager wrote for ``assets``.

    ``check_name``: also emit an ``AssetCheckEvaluation`` for that check on each asset (declare it, e.g.
    with ``build_readback_check``). ``max_lag_s``: after this long invisible, request a recovery run of
    the asset (``run_key`` = ``zerobus-readback-recovery:<asset>:<storage id>``, the materialisation's
    partition key). The run carries the tags ``zerobus/resume_source`` and ``zerobus/resume_partition``
    with the original write's coverage keys; the IO manager then resumes that coverage, so the recovery
    re-commits and re-records the write without appending rows that are already durable.

    A materialisation with no delivered coverage never blocks the cursor: an empty write (0 rows) is
    observed as verified with ``readback/nothing_to_verify``; a write reporting rows is observed as not
    verified (the sensor and the IO manager disagree on where coverage lives).
    """
    keys = tuple(dg.AssetKey.from_coercible(a) for a in assets)
    settings = ReadbackSensorSettings(
        keys, resource_key, max_lag_s, check_name, request_recovery, batch_limit
    )

    @dg.sensor(
        name=name,
        asset_selection=dg.AssetSelection.assets(*keys),
        required_resource_keys={resource_key},
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Verifies through Iceberg that each Zerobus write is visible; requests recovery after "
        f"{max_lag_s:.0f}s of lag.",
    )
    def _readback(context: dg.SensorEvaluationContext, **_direct: Any) -> dg.SensorResult | dg.SkipReason:
        # ``**_direct``: invoking a sensor directly (tests, the demo) also passes its required
        # resources as keyword arguments; the daemon does not. Both read them from the context.
        zerobus: ZerobusResource = getattr(context.resources, resource_key)
        cursor = ReadbackCursor.parse(context.cursor)
        for key in keys:  # a fresh entry is not progress: compare like with like
            cursor.of(key.to_user_string())
        before = cursor.dumps()
        outcome = evaluate_tick(context.instance, lambda target: _attempt(zerobus, target), settings, cursor)
        after = cursor.dumps()
        skip = "; ".join(outcome.waiting) if outcome.waiting else "no new Zerobus materialisations"
        if outcome.events or outcome.run_requests:
            # Without runs Dagster shows the tick as skipped: say what it verified, not "empty result".
            judged = "; ".join(outcome.judged + outcome.waiting)
            return dg.SensorResult(
                asset_events=outcome.events,
                run_requests=outcome.run_requests,
                cursor=after,
                skip_reason=None if outcome.run_requests else judged,
            )
        if after != before:
            return dg.SensorResult(skip_reason=skip, cursor=after)
        return dg.SkipReason(skip)

    return _readback
