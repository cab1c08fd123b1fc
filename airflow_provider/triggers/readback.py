"""``ZerobusReadbackTrigger``: wait in the triggerer until Iceberg shows what Zerobus delivered.

Receives only primitives and an absolute deadline (``end_time``, epoch seconds), because ``serialize()``
is captured once, stored in the ``trigger`` table and the trigger may be re-created on another
triggerer. No secret is among them: the triggerer reads the connection ``zerobus_conn_id`` itself
(asynchronously) and rebuilds the config from it; ``config_overrides`` holding a secret setting are
refused. What to verify is the ingest's own record, ``ranges`` (``[[start, end], ...]`` of
``source``/``partition``), so the triggerer host needs no file of the worker's; without it the core
falls back to the table's own truth. ``replaces``: the ingest was a ``replace`` of that logical
partition, so rows of its other runs still in the table are duplicates (docs/adr/0007-write-modes.md).

Every poll is one read-only ``ZerobusHook.averify_once`` (the core's ``ReadbackService``, run
in a worker thread: pyiceberg is synchronous): no write runtime, no stream pool. Whether an attempt is
final is the core's ``ReadbackStatus``; the trigger yields exactly one event, ``status`` success /
error / timeout, carrying the last outcome as ``outcome`` (``ReadbackOutcome.to_json()``). An error
with ``reason``
``nothing_to_verify`` means nothing was delivered for the key, which the sensor resolves against the
ingest's XCom (the triggerer has no task context to do so).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.utils.readback import (
    NOTHING_TO_VERIFY,
    Status,
    event_status,
    redacted,
    refuse_secret_overrides,
    report_of,
)
from zerobus_orchestration.readback.record import ranges_from_primitives, ranges_to_primitives
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus

CLASSPATH = "airflow_provider.triggers.readback.ZerobusReadbackTrigger"


class ZerobusReadbackTrigger(BaseTrigger):
    """Poll read-back of ``table`` (optionally one coverage ``source`` / ``partition``) until ``end_time``.

    :param ranges: the delivered offset ranges of ``source``/``partition`` from the ingest's record.
    :param replaces: the logical partition a ``replace`` ingest replaced (its XCom's ``replace_key``).
    :param poll_interval: first pause between polls, seconds; grows by half each poll up to
        ``max_poll_interval`` (Iceberg conversion lag is seconds to minutes).
    :param config_overrides: non-secret settings over the connection's (a secret raises ``ConfigError``).
    """

    def __init__(
        self,
        *,
        table: str,
        end_time: float,
        zerobus_conn_id: str = ZerobusHook.default_conn_name,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[Sequence[int]] | None = None,
        replaces: str | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        overrides = dict(config_overrides or {})
        refuse_secret_overrides(overrides, conn_id=zerobus_conn_id, where=f"read-back trigger for {table}")
        self.table = table
        self.end_time = float(end_time)
        self.zerobus_conn_id = zerobus_conn_id
        self.source = source
        self.partition = partition
        self.ranges = None if ranges is None else ranges_to_primitives(ranges_from_primitives(ranges))
        self.replaces = replaces
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = float(max_poll_interval)
        self.config_overrides = overrides

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "table": self.table,
                "end_time": self.end_time,
                "zerobus_conn_id": self.zerobus_conn_id,
                "source": self.source,
                "partition": self.partition,
                "ranges": self.ranges,
                "replaces": self.replaces,
                "poll_interval": self.poll_interval,
                "max_poll_interval": self.max_poll_interval,
                "config_overrides": self.config_overrides,
            },
        )

    def _event(
        self, status: Status, message: str, polls: int, started: float, last: ReadbackOutcome | None
    ) -> TriggerEvent:
        nothing = last is not None and last.status is ReadbackStatus.NOTHING_TO_VERIFY
        return TriggerEvent(  # type: ignore[no-untyped-call]
            {
                "status": status.value,
                "message": message,
                "reason": NOTHING_TO_VERIFY if nothing else None,
                "table": self.table,
                "source": self.source,
                "partition": self.partition,
                "polls": polls,
                # How long this trigger waited for Iceberg: the lag the sensor logs on completion.
                "waited_s": round(time.time() - started, 3),
                "report": report_of(last),
                "outcome": None if last is None else redacted(last).to_json(),
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The connection (secrets included) is read here, in the triggerer, never stored in the kwargs.
        hook = ZerobusHook(zerobus_conn_id=self.zerobus_conn_id, config_overrides=self.config_overrides)
        yield await self._poll_until_done(hook, time.time())

    async def _poll_until_done(self, hook: ZerobusHook, started: float) -> TriggerEvent:
        polls = 0
        interval = self.poll_interval
        last: ReadbackOutcome | None = None
        ranges = None if self.ranges is None else ranges_from_primitives(self.ranges)
        while time.time() < self.end_time:
            polls += 1
            last = await hook.averify_once(
                self.table,
                source=self.source,
                partition=self.partition,
                ranges=ranges,
                replaces=self.replaces,
            )
            status = event_status(last)
            if status is not None:
                return self._event(status, last.message, polls, started, last)
            self.log.info("%s (poll %d); next poll in %.1fs", last.message, polls, interval)
            await asyncio.sleep(max(0.0, min(interval, self.end_time - time.time())))
            interval = min(interval * 1.5, self.max_poll_interval)
        message = f"{self.table}: Iceberg did not show the delivered rows before the deadline"
        if last is not None:
            message += f"; last attempt: {last.message}"
        return self._event(Status.TIMEOUT, message, polls, started, last)
