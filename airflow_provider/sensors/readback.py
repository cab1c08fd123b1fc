"""``ZerobusReadbackSensor``: succeed once Iceberg read-back shows the rows Zerobus delivered.

Deferrable by default: one fast check in the worker, then ``ZerobusReadbackTrigger`` waits in the
triggerer with an absolute deadline, so the wait for Iceberg (seconds to minutes) holds no worker slot.
``deferrable=False`` pokes with the same single attempt instead (for a deployment without a triggerer).
The default timeout is one hour, not ``BaseSensorOperator``'s seven days: Zerobus commits within seconds
(P95 <= 30 s) and the UniForm conversion follows, so a write not visible after an hour needs a person,
not more waiting; lost or duplicated rows fail at once whatever the timeout. Both go through the core's
read-only ``ReadbackService`` (no write runtime) and verify the ingest's own record (its XCom: source,
partition, delivered offsets), so the sensor's worker and the triggerer need no file of the ingest's
worker. The core's ``ReadbackStatus`` decides: a missing table or a lagging snapshot is "not yet"; a
permanent error fails the task without
retries. Deferring never stores a secret in the trigger's kwargs: secret ``config_overrides`` are
refused then (put them in the connection, which the triggerer reads itself).

No delivered coverage for the key is never "not yet" (waiting cannot create it): the sensor succeeds
when the ingest's XCom says it wrote 0 rows, and otherwise fails naming the table, source and partition.

A ``replace`` ingest (its XCom's ``write_mode``) is verified under the partition it wrote
(``<logical date or replace_key>/<map index>@<run id>``) and with ``replaces`` = its ``replace_key``: rows of
other runs of that logical partition still in the table are counted as duplicates and the read-back is
``INCOMPLETE`` until they are gone (docs/adr/0007-write-modes.md), never "verified, 0 duplicates".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.base import coverage_keys
from airflow_provider.triggers.readback import ZerobusReadbackTrigger
from airflow_provider.utils.observability import redact
from airflow_provider.utils.readback import (
    NOTHING_TO_VERIFY,
    Status,
    event_status,
    refuse_secret_overrides,
    report_of,
    report_summary,
)
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.readback.record import WriteRecord
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
from zerobus_orchestration.write_modes import WriteMode

DEFAULT_TIMEOUT_S = 3600.0
"""An hour: far past Zerobus' time to table and the Iceberg conversion, far short of seven days."""
DEFAULT_POKE_INTERVAL_S = 5.0


class ZerobusReadbackSensor(BaseSensorOperator):
    """Wait until ``table`` reads back through Iceberg, verified against coverage.

    What is verified, narrowest first:

    :param ingest_task_id: the ``ZerobusIngestOperator`` of this DAG run whose rows to verify (its
        coverage keys ``<dag_id>/<task_id>`` and ``<run_id>/<map_index>``).
    :param ingest_map_index: that task's map index (default ``-1``: not mapped).
    :param source: / :param partition: explicit coverage keys instead; neither set = the whole table.
    :param replaces: with explicit ``source``/``partition`` of a ``replace`` write, its logical
        partition (the ``replace_key``): rows of other runs of it still in the table count as
        duplicates. With ``ingest_task_id`` it comes from the ingest's XCom instead.

    An ingest that wrote 0 rows leaves nothing to verify: with ``ingest_task_id`` the sensor then
    succeeds (its XCom says ``rows_written == 0``); no coverage in any other case (a mistyped
    ``ingest_task_id``, a wrong source/partition or table) fails the task at once instead of poking
    until the timeout.

    :param table: the table.
    :param deferrable: wait in the triggerer (default ``True``; ``False`` pokes in a worker slot).
    :param max_poll_interval: ceiling of the trigger's growing poll interval, seconds.
    ``timeout`` defaults to ``DEFAULT_TIMEOUT_S`` (one hour) and ``poke_interval`` to 5 seconds.
    """

    template_fields: Sequence[str] = (
        "table",
        "ingest_task_id",
        "ingest_map_index",
        "source",
        "partition",
        "replaces",
        "zerobus_conn_id",
        "config_overrides",
    )
    ui_color = "#eaf7ea"

    def __init__(
        self,
        *,
        table: str,
        ingest_task_id: str | None = None,
        ingest_map_index: int = -1,
        source: str | None = None,
        partition: str | None = None,
        replaces: str | None = None,
        zerobus_conn_id: str = ZerobusHook.default_conn_name,
        config_overrides: Mapping[str, Any] | None = None,
        deferrable: bool = True,
        max_poll_interval: float = 30.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", DEFAULT_TIMEOUT_S)
        kwargs.setdefault("poke_interval", DEFAULT_POKE_INTERVAL_S)
        super().__init__(**kwargs)
        explicit = (source, partition, replaces)
        if ingest_task_id is not None and any(value is not None for value in explicit):
            raise ValueError(
                f"{self.task_id}: give ingest_task_id or source/partition/replaces, not both "
                "(with ingest_task_id they come from the ingest's XCom)"
            )
        if replaces is not None and (source is None or partition is None):
            raise ValueError(
                f"{self.task_id}: replaces={replaces!r} needs the replace write's source and partition "
                "(its run's partition, '<replaces>@<run>')"
            )
        self.table = table
        self.ingest_task_id = ingest_task_id
        self.ingest_map_index = ingest_map_index
        self.source = source
        self.partition = partition
        self.replaces = replaces
        self.zerobus_conn_id = zerobus_conn_id
        self.config_overrides = dict(config_overrides or {})
        self.deferrable = deferrable
        self.max_poll_interval = max_poll_interval

    @cached_property
    def hook(self) -> ZerobusHook:
        return ZerobusHook(zerobus_conn_id=self.zerobus_conn_id, config_overrides=self.config_overrides)

    def _keys(self, context: Context) -> tuple[str | None, str | None]:
        source, partition, _replaces = self._target(context)
        return source, partition

    def _target(self, context: Context) -> tuple[str | None, str | None, str | None]:
        """(source, partition, replaced logical partition or ``None``) of the write to verify."""
        if not self.ingest_task_id:
            return self.source or None, self.partition or None, self.replaces or None
        run_id = str(context["run_id"])
        source, partition = coverage_keys(self.dag_id, self.ingest_task_id, run_id, self.ingest_map_index)
        upstream = self._upstream(context)
        written = None if upstream is None else upstream.get("partition")
        if upstream is None or upstream.get("source") != source or not isinstance(written, str):
            return source, partition, None
        # The ingest's record names the run whose rows hold its input: its own, its next revision's (a
        # cleared task whose input changed), or an earlier run's (already delivered).
        key = upstream.get("replace_key")
        if upstream.get("write_mode") == WriteMode.REPLACE.value and isinstance(key, str):
            return source, written, key
        return source, written, None

    def _upstream(self, context: Context) -> Mapping[str, Any] | None:
        upstream = context["ti"].xcom_pull(task_ids=self.ingest_task_id, map_indexes=self.ingest_map_index)
        return upstream if isinstance(upstream, Mapping) else None

    def _record(self, context: Context) -> WriteRecord | None:
        """The ingest's own record of what it delivered (its XCom), if it left one."""
        if not self.ingest_task_id:
            return None
        upstream = self._upstream(context)
        if upstream is None:
            return None
        record = WriteRecord.from_summary(upstream, table=self.table)
        if record is None or (record.source, record.partition) != self._keys(context):
            return None  # another write's summary: verify the keys, from the table's own truth
        return record

    def _attempt(self, context: Context) -> ReadbackOutcome:
        source, partition, replaces = self._target(context)
        record = self._record(context)
        return self.hook.verify_once(
            self.table,
            source=source,
            partition=partition,
            ranges=None if record is None else record.ranges,
            replaces=replaces,
        )

    def _succeed(self, report: dict[str, Any] | None) -> dict[str, Any]:
        self.log.info("%s: read-back verified: %s", self.table, report_summary(report))
        return {"table": self.table, **(report or {})}

    def _nothing_to_verify(self, context: Context, message: str) -> dict[str, Any]:
        """No delivered coverage: an empty ingest succeeds, anything else fails with the likely fix."""
        source, partition = self._keys(context)
        where = f"{self.table} (source {source!r}, partition {partition!r})"
        if not self.ingest_task_id:
            raise AirflowFailException(
                f"{self.task_id}: {message}. Nothing was delivered to {where}: check table, source and "
                "partition (an ingest writes source '<dag_id>/<task_id>', partition '<run_id>/<map_index>'), "
                "or give ingest_task_id"
            )
        upstream = context["ti"].xcom_pull(task_ids=self.ingest_task_id, map_indexes=self.ingest_map_index)
        if (
            isinstance(upstream, Mapping)
            and upstream.get("rows_written") == 0
            and not upstream.get("rows_skipped")
        ):
            self.log.info("%s: ingest task %r wrote 0 rows; nothing to verify", where, self.ingest_task_id)
            return {
                "table": self.table,
                "source": source,
                "partition": partition,
                "rows_written": 0,
                "expected_rows": 0,
                "nothing_to_verify": True,
                "verified": True,
            }
        if upstream is None:
            fix = (
                f"task {self.ingest_task_id!r} (map index {self.ingest_map_index}) has no XCom in this "
                "run: check ingest_task_id / ingest_map_index for a typo and that this sensor runs "
                "downstream of that ingest"
            )
        else:
            written = upstream.get("rows_written") if isinstance(upstream, Mapping) else None
            fix = (
                f"task {self.ingest_task_id!r} reports rows_written={written} but no coverage was found: "
                "check that the sensor uses the same table and zerobus connection (warehouse) as the ingest"
            )
        raise AirflowFailException(f"{self.task_id}: nothing was delivered to {where}; {fix}")

    def _finish_attempt(self, context: Context) -> ReadbackOutcome:
        """One read-only attempt: nothing to drain or release (no write runtime is involved)."""
        return self._attempt(context)

    def _decide(self, context: Context, outcome: ReadbackOutcome) -> dict[str, Any] | None:
        """The XCom value of a finished wait, ``None`` to keep waiting; raises on a failed read-back."""
        if outcome.status is ReadbackStatus.NOTHING_TO_VERIFY:
            return self._nothing_to_verify(context, outcome.message)
        if outcome.status is ReadbackStatus.VERIFIED:
            return self._succeed(report_of(outcome))
        if outcome.is_terminal:
            raise AirflowFailException(f"{self.task_id}: {outcome.message}")
        return None

    def poke(self, context: Context) -> bool | PokeReturnValue:
        outcome = self._finish_attempt(context)
        done = self._decide(context, outcome)
        if done is not None:
            return PokeReturnValue(is_done=True, xcom_value=done)
        self.log.info("%s", outcome.message)
        return False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # Before any work: a deferral would store these overrides in the trigger table.
        try:
            refuse_secret_overrides(self.config_overrides, conn_id=self.zerobus_conn_id, where=self.task_id)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from exc
        outcome = self._finish_attempt(context)  # cheap check first: often there is nothing to wait for
        done = self._decide(context, outcome)
        if done is not None:
            return done
        source, partition, replaces = self._target(context)
        record = self._record(context)
        trigger = ZerobusReadbackTrigger(
            table=self.table,
            end_time=time.time() + self.timeout,
            zerobus_conn_id=self.zerobus_conn_id,
            source=source,
            partition=partition,
            ranges=None if record is None else record.primitives(),
            replaces=replaces,
            poll_interval=float(self.poke_interval),
            max_poll_interval=self.max_poll_interval,
            config_overrides=self.config_overrides,
        )
        self.log.info("%s; deferring for up to %.0fs", outcome.message, self.timeout)
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        message = str(event.get("message", ""))
        # Resumed in a fresh worker process: no runtime here, so the end-of-task lines are the report.
        self.log.info(
            "read-back trigger finished after %s poll(s) and %ss: %s",
            event.get("polls"),
            event.get("waited_s"),
            message,
        )
        report = event.get("report")
        if isinstance(report, Mapping):
            self.log.info("%s: read-back report: %s", self.table, report_summary(report))
        outcome = event.get("outcome")
        if isinstance(outcome, Mapping):  # the core's verdict; events of older triggers lack it
            last = ReadbackOutcome.from_json(outcome)
            if event_status(last) is not None:
                done = self._decide(context, last)
                if done is not None:
                    return done
        if event.get("reason") == NOTHING_TO_VERIFY:
            return self._nothing_to_verify(context, message)
        if status == Status.SUCCESS:
            return {"table": self.table, **redact(report or {})}
        if status == Status.TIMEOUT:
            raise AirflowSensorTimeout(f"{self.task_id}: {message}")
        if status == Status.ERROR:
            raise AirflowFailException(f"{self.task_id}: {message}")
        raise AirflowException(f"{self.task_id}: unexpected trigger event {event!r}")
