"""``ZerobusHook``: a ``zerobus`` connection -> the core ``ZerobusConfig`` -> the per-process runtime.

All network behaviour of the provider lives behind this hook; operators, the sensor and the trigger only
call it. The runtime (stream pool, ack lanes, catalog, coverage, read-back, and in embedded mode the
emulator) is acquired lazily on first use, never at DAG-parse time, and is shared by every hook in the
process with the same config. In production a task try is its own forked process, so that means one pool
per task try. ``release()`` drains (flushes) and drops this hook's reference; operators call it in
``finally`` and ``on_kill`` calls ``close_all()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider.utils.connection import CONN_TYPE, ConnectionFields, config_from_connection

if TYPE_CHECKING:
    import datetime

    import pyarrow as pa

    from zerobus_orchestration.catalog.base import ReconcileOutcome
    from zerobus_orchestration.catalog.plan import ReconcilePlan
    from zerobus_orchestration.config import Role, ZerobusConfig
    from zerobus_orchestration.ranges import OffsetRange
    from zerobus_orchestration.readback.status import ReadbackOutcome
    from zerobus_orchestration.runtime.facade import WriteResult, ZerobusRuntime

log = logging.getLogger(__name__)


class ZerobusHook(BaseHook):
    """Reach Zerobus (or the embedded emulator) through a ``zerobus`` connection.

    :param zerobus_conn_id: the ``zerobus`` connection.
    :param config_overrides: nested ``ZerobusConfig`` settings applied over the connection's, e.g.
        ``{"readback": {"wait_timeout_s": 30}}``.
    """

    conn_name_attr = "zerobus_conn_id"
    default_conn_name = "zerobus_default"
    conn_type = CONN_TYPE
    hook_name = "Zerobus"

    def __init__(
        self,
        zerobus_conn_id: str = default_conn_name,
        config_overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zerobus_conn_id = zerobus_conn_id
        self.config_overrides = dict(config_overrides or {})
        self._config: ZerobusConfig | None = None
        self._runtime: ZerobusRuntime | None = None

    # --- configuration ------------------------------------------------------------------------------

    def get_config(self) -> ZerobusConfig:
        """The connection's config (read once per hook)."""
        if self._config is None:
            conn = self.get_connection(self.zerobus_conn_id)
            fields = ConnectionFields.of(conn, conn.extra_dejson)
            self._config = config_from_connection(fields, self.config_overrides)
        return self._config

    async def aget_config(self) -> ZerobusConfig:
        """``get_config`` for event loops: sync connection access there risks ``DeadlockImminentError``."""
        if self._config is None:
            conn = await self.aget_connection(self.zerobus_conn_id)
            fields = ConnectionFields.of(conn, await conn.aextra_dejson())
            self._config = config_from_connection(fields, self.config_overrides)
        return self._config

    # --- runtime lifecycle --------------------------------------------------------------------------

    def get_conn(self) -> ZerobusRuntime:
        """The process's runtime for this config, acquired on first call (starts the emulator if embedded)."""
        if self._runtime is None:
            from zerobus_orchestration.runtime.registry import acquire_runtime

            config = self.get_config()
            self._runtime = acquire_runtime(config)
            log.info(
                "zerobus runtime ready for connection %r (embedded=%s)", self.zerobus_conn_id, config.embedded
            )
        return self._runtime

    @property
    def runtime_acquired(self) -> bool:
        return self._runtime is not None

    def drain(self, timeout: float | None = None) -> None:
        """Block until everything this process submitted is durable (no-op before first use)."""
        if self._runtime is not None:
            self._runtime.flush(timeout)

    def release(self) -> None:
        """Drain, then drop this hook's reference. Idempotent. The runtime itself outlives the hook."""
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        from zerobus_orchestration.runtime.registry import release_runtime

        try:
            runtime.flush()
        finally:
            release_runtime(runtime.config)

    def close_all(self) -> None:
        """Drain and close every runtime of this process (``on_kill``: the process is going away)."""
        from zerobus_orchestration.runtime.registry import close_all_runtimes

        self._runtime = None
        close_all_runtimes()

    # --- catalog ------------------------------------------------------------------------------------

    def plan(
        self,
        table: str,
        schema: pa.Schema,
        *,
        role: Role | None = None,
        descriptions: Mapping[str, str] | None = None,
    ) -> ReconcilePlan:
        return self.get_conn().plan(table, schema, role=role, descriptions=descriptions)

    def reconcile(
        self,
        table: str,
        schema: pa.Schema,
        *,
        role: Role | None = None,
        descriptions: Mapping[str, str] | None = None,
    ) -> ReconcileOutcome:
        return self.get_conn().reconcile(table, schema, role=role, descriptions=descriptions)

    def preconditions(self, table: str) -> list[Any]:
        return list(self.get_conn().preconditions(table))

    # --- data ---------------------------------------------------------------------------------------

    def write(
        self,
        table: str,
        data: Any,
        *,
        source: str,
        partition: str = "",
        descriptions: Mapping[str, str] | None = None,
        role: Role | None = None,
        resume: bool = True,
        mode: str = "auto",
        schema: pa.Schema | None = None,
        not_before: datetime.datetime | None = None,
        allow_raw_replace: bool = False,
    ) -> WriteResult:
        """Push ``data`` pipelined; returns once the last batch is durable (resumes from coverage).

        ``mode``: what a re-run of the partition's logical part (before its last ``@``) does, ``auto``,
        ``replace`` or ``append`` (docs/adr/0007-write-modes.md). ``schema``: the table is created from it
        when ``data`` holds no row. ``not_before``: no try of this partition began before it
        (``ZerobusRuntime.write``: a resume then reads only the table's files since).
        """
        return self.get_conn().write(
            table,
            data,
            source=source,
            partition=partition,
            descriptions=descriptions,
            role=role,
            resume=resume,
            mode=mode,
            schema=schema,
            not_before=not_before,
            allow_raw_replace=allow_raw_replace,
        )

    def verify_once(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
        replaces: str | None = None,
    ) -> ReadbackOutcome:
        """One non-blocking, judged, read-only read-back attempt; its status says whether to keep waiting.

        Goes through the core's ``ReadbackService`` (catalog and Iceberg only): no write runtime, no
        stream pool. ``ranges``: what the ingest recorded as delivered (its XCom). ``replaces``: the
        ingest was a ``replace`` of this logical partition; rows of its other runs still in the table are
        duplicates (the attempt is then ``INCOMPLETE``).
        """
        from zerobus_orchestration.readback.judge import outcome_of_error
        from zerobus_orchestration.runtime.registry import readback_service

        try:
            service = readback_service(self.get_config())
        except Exception as exc:  # a connection that builds no service is judged like any failed attempt
            return outcome_of_error(exc, table)
        return service.verify_once(
            table, source=source, partition=partition, ranges=ranges, replaces=replaces
        )

    async def averify_once(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
        replaces: str | None = None,
    ) -> ReadbackOutcome:
        """``verify_once`` for triggers: the connection is read asynchronously, pyiceberg in a
        thread."""
        try:
            await self.aget_config()
        except Exception as exc:  # judged by the core, like every other failure of an attempt
            from zerobus_orchestration.readback.judge import outcome_of_error

            return outcome_of_error(exc, table)
        return await asyncio.to_thread(
            self.verify_once,
            table,
            source=source,
            partition=partition,
            ranges=ranges,
            replaces=replaces,
        )

    def health(self) -> dict[str, Any]:
        """The runtime's health snapshot as plain data (pool liveness, backpressure, totals, latencies)."""
        return dict(self.get_conn().health().as_dict())

    # --- UI -----------------------------------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button and ``airflow connections test``; never echoes secrets.

        A remote connection is tested by reaching what it points at (a TCP connection to the Zerobus
        endpoint and an OAuth token from the workspace), not by building a config that merely parses;
        an embedded one by bringing the local emulator up, and the message says that it is local.
        """
        try:
            config = self.get_config()
            ok, message = (True, self._test_embedded(config)) if config.embedded else _test_remote(config)
        except Exception as exc:
            ok, message = False, f"{type(exc).__name__}: {exc}"
        log.info("zerobus connection %r test: %s", self.zerobus_conn_id, message)
        return ok, message

    def _test_embedded(self, config: ZerobusConfig) -> str:
        from zerobus_orchestration.locations import local_path

        try:
            self.get_conn()
        finally:
            self.release()
        where = (
            str(Path(local_path(config.warehouse)).resolve()) if config.local_warehouse else config.warehouse
        )
        return (
            f"embedded emulator (a local stand-in for Zerobus, not Databricks) is up; rows go to the "
            f"warehouse {where} on this machine"
        )


def _test_remote(config: ZerobusConfig) -> tuple[bool, str]:
    """Reach the endpoint and the workspace; a setting every task would fail on is a failure too."""
    from airflow_provider.utils.reachability import probe_remote
    from zerobus_orchestration.config import CatalogBackend

    ok, message = probe_remote(config, config.connect_timeout_s)
    if config.catalog.backend is CatalogBackend.UNITY and not config.catalog.sql_warehouse_id:
        unset = "extra 'warehouse_id' (the SQL warehouse that runs table DDL) is not set"
        return False, f"{unset}; {message}"
    return ok, message
