"""``ZerobusReadbackTrigger``: wait in the triggerer until Iceberg shows what Zerobus delivered.

Receives only primitives and an absolute deadline (``end_time``, epoch seconds), because ``serialize()``
is captured once and the trigger may be re-created on another triggerer. It keeps no cursor: every poll
is a fresh, read-only ``verify_readback_once`` run in a worker thread (pyiceberg is synchronous), with the
connection read asynchronously. Whether an attempt is final is the core's ``ReadbackStatus``; the
trigger yields exactly one event, ``status`` success / error / timeout, carrying the last outcome as
``outcome`` (``ReadbackOutcome.to_json()``). An error with ``reason`` ``nothing_to_verify`` means no
coverage exists for the key, which the sensor resolves against the ingest's XCom (the triggerer has no
task context to do so).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.utils.readback import NOTHING_TO_VERIFY, Status, event_status, redacted, report_of
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus

CLASSPATH = "airflow_provider.triggers.readback.ZerobusReadbackTrigger"


class ZerobusReadbackTrigger(BaseTrigger):
    """Poll read-back of ``table`` (optionally one coverage ``source`` / ``partition``) until ``end_time``.

    :param poll_interval: first pause between polls, seconds; grows by half each poll up to
        ``max_poll_interval`` (Iceberg conversion lag is seconds to minutes).
    """

    def __init__(
        self,
        *,
        table: str,
        end_time: float,
        zerobus_conn_id: str = ZerobusHook.default_conn_name,
        source: str | None = None,
        partition: str | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.table = table
        self.end_time = float(end_time)
        self.zerobus_conn_id = zerobus_conn_id
        self.source = source
        self.partition = partition
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = float(max_poll_interval)
        self.config_overrides = dict(config_overrides or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "table": self.table,
                "end_time": self.end_time,
                "zerobus_conn_id": self.zerobus_conn_id,
                "source": self.source,
                "partition": self.partition,
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
        hook = ZerobusHook(zerobus_conn_id=self.zerobus_conn_id, config_overrides=self.config_overrides)
        try:
            event = await self._poll_until_done(hook)
            # Release before yielding: after the one event the generator may be dropped without being
            # resumed (dag.test() does), and a finally that awaits would then run without a loop.
            if hook.runtime_acquired:
                await asyncio.to_thread(hook.release)
        finally:
            if hook.runtime_acquired:  # cancelled mid-poll: triggers only read, so this is quick
                hook.release()
        yield event

    async def _poll_until_done(self, hook: ZerobusHook) -> TriggerEvent:
        polls = 0
        started = time.time()
        interval = self.poll_interval
        last: ReadbackOutcome | None = None
        while time.time() < self.end_time:
            polls += 1
            last = await hook.averify_readback_once(self.table, source=self.source, partition=self.partition)
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
