"""The process-scoped runtime: everything a Dagster asset or an Airflow task needs, behind one object.

``ZerobusRuntime`` is one config's write path; ``registry.acquire_runtime(config)`` returns
the runtime of this process for that config (the documented per-process registry, keyed by pid and
config hash, refcounted). It owns:

- the transport: the official SDK against Databricks, or against the embedded emulator it starts
  when no endpoint is configured (the embedded default);
- one long-lived ``StreamPool`` per target table (never a stream per batch or per task);
- the catalog (``local`` or ``unity``), called before the first write and on schema drift;
- one coverage store per table, advanced only by the ack lanes (each lane kind commits into its own
  file, so a stalled derived lane never holds the raw lane's commit);
- read-back through the Iceberg REST catalog.

Correctness never depends on shutdown hooks: ``write`` returns only after the last batch is durable.
The hooks of the registry (``runtime/process_registry.py``) only drain streams that a caller left
unflushed. Starting the emulator and building the transport to it is the embedded mode's
(``runtime/embedded.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from zerobus_orchestration.catalog.base import DesiredTable, ReconcileOutcome, TableCatalog, TableTags
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.factory import catalog_from_config
from zerobus_orchestration.catalog.plan import ReconcilePlan
from zerobus_orchestration.catalog.preconditions import Condition, check_primary_raw
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import (
    ConfigError,
    ResumeMismatchError,
    RunSupersededError,
)
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.resume.rerun import Replay
from zerobus_orchestration.runtime import embedded, lifecycle, sending
from zerobus_orchestration.runtime.readback_service import ReadbackService
from zerobus_orchestration.runtime.results import RuntimeHealth as RuntimeHealth
from zerobus_orchestration.runtime.results import WriteResult as WriteResult
from zerobus_orchestration.runtime.sending import DEFAULT_SINK_ID as DEFAULT_SINK_ID
from zerobus_orchestration.runtime.sending import ArrowData as ArrowData
from zerobus_orchestration.runtime.sending import Descriptions as Descriptions
from zerobus_orchestration.runtime.sending import Send, Sent
from zerobus_orchestration.runtime.supersede import supersede
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.pool import StreamPool
from zerobus_orchestration.sink.sink import ZerobusSink, is_in_memory
from zerobus_orchestration.storage import CredentialCache
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.transport.base import Transport
from zerobus_orchestration.transport.reachability import require_reachable
from zerobus_orchestration.write_modes import (
    RUN_SEPARATOR,
    PartitionRun,
    Rerun,
    WriteMode,
    partition_of_tag,
    rerun_policy,
    source_tag,
)

if TYPE_CHECKING:  # read-back's Iceberg side is imported on first use (see ``ReadbackService``)
    from zerobus_orchestration.readback.endpoint import IcebergEndpoint
    from zerobus_orchestration.readback.status import ReadbackOutcome
    from zerobus_orchestration.runtime.embedded import EmulatorHandle

log = logging.getLogger(__name__)


class ZerobusRuntime:
    """Transport, pools, catalog, coverage and read-back for one config in one process."""

    def __init__(
        self,
        config: ZerobusConfig,
        *,
        transport: Transport | None = None,
        credentials: CredentialCache | None = None,
    ) -> None:
        """``credentials`` overrides the cache ``config.credential_vending`` would build (own vendor,
        margin or clock); the embedded facade vends read-back credentials through it."""
        self.config = config
        self.metrics = SinkMetrics()
        self.emulator: EmulatorHandle | None = None
        self.credentials = credentials if credentials is not None else embedded.build_credentials(config)
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, LaneKind], StreamPool] = {}
        self._coverage: dict[str, CoverageStore] = {}
        self._rows_resent_after_crash = 0  # over every write of this runtime, for ``health()``
        self._closed = False
        log.info("zerobus runtime starting with %s", config.effective_config())
        if not config.embedded and not config.coverage.location and not config.state_dir:
            # Resume and read-back trust coverage; a per-host default file is invisible to the other
            # workers of a distributed executor, whose retries would then re-send everything.
            log.warning(
                "zerobus coverage is kept in %s on this host (the default). If tasks or steps of one "
                "pipeline run on several hosts, set zerobus.coverage.location (or zerobus.state_dir) to a "
                "path every worker shares, or a retry on another host re-sends rows already delivered",
                config.coverage_location,
            )
        if transport is None and not config.embedded:
            # Once, bounded: the SDKs would otherwise retry a dead workspace for minutes, then fail
            # without naming it.
            require_reachable(config)
        try:
            self.catalog: TableCatalog = catalog_from_config(config)
            if transport is None and config.embedded:
                self.emulator = embedded.start_emulator(config, self.credentials)
            self.transport: Transport = transport or embedded.build_transport(config, self.emulator)
        except BaseException:
            self._stop_emulator()
            raise
        # Read-back reads through the same catalog, coverage stores and (embedded) emulator.
        self.readbacks = ReadbackService(
            config, catalog=self.catalog, coverage=self.coverage, emulator=self.emulator
        )

    @property
    def embedded(self) -> bool:
        return self.config.embedded

    # -- catalog --------------------------------------------------------------------------------------

    def desired(
        self,
        table: str,
        schema: pa.Schema,
        *,
        role: Role | None = None,
        descriptions: Descriptions = None,
        tags: TableTags | None = None,
    ) -> DesiredTable:
        gate = self._gate(role, descriptions, tags)
        return DesiredTable.build(
            table,
            schema,
            gate.role,
            descriptions=gate.descriptions,
            tags=gate.tags,
            properties=gate.properties,
            allow_widening=gate.allow_widening,
            comment_policy=gate.comment_policy,
        )

    def plan(
        self,
        table: str,
        schema: pa.Schema,
        *,
        role: Role | None = None,
        descriptions: Descriptions = None,
        tags: TableTags | None = None,
    ) -> ReconcilePlan:
        """What ``reconcile`` would do; nothing is applied."""
        desired = self.desired(table, schema, role=role, descriptions=descriptions, tags=tags)
        return self.catalog.plan(table, desired)

    def reconcile(
        self,
        table: str,
        schema: pa.Schema,
        *,
        role: Role | None = None,
        descriptions: Descriptions = None,
        tags: TableTags | None = None,
    ) -> ReconcileOutcome:
        """Create or evolve ``table`` for ``schema``; ``PlanRefusedError`` when the plan refuses."""
        desired = self.desired(table, schema, role=role, descriptions=descriptions, tags=tags)
        outcome = self.catalog.reconcile(table, desired)
        self.catalog.register_sink(table, DEFAULT_SINK_ID)
        return outcome

    def preconditions(self, table: str) -> list[Condition]:
        """Primary-raw preconditions, re-read from the catalog on every call."""
        return check_primary_raw(self.catalog, TableName.parse(table).full_name)

    # -- writing --------------------------------------------------------------------------------------

    def sink(
        self,
        table: str,
        *,
        source: str,
        partition: str = "",
        role: Role | None = None,
        descriptions: Descriptions = None,
        tags: TableTags | None = None,
        offset_column: str | None = None,
        ordering_key: str | None = None,
        start_offset: int = 0,
    ) -> ZerobusSink:
        """A sink over this process's long-lived pool for ``table``; the caller flushes it."""
        name = TableName.parse(table).full_name
        gate = self._gate(role, descriptions, tags, source=source)
        lane = LaneKind.RAW if gate.role is Role.PRIMARY_RAW else LaneKind.DERIVED
        return ZerobusSink(
            self._pool(name, lane),
            source=source_tag(source, partition),
            partition=partition,
            sink_id=DEFAULT_SINK_ID,
            start_offset=start_offset,
            offset_column=offset_column,
            ordering_key=ordering_key,
            gate=gate,
            lane=lane,
        )

    def covered(self, table: str, *, source: str, partition: str = "") -> tuple[OffsetRange, ...]:
        """Row positions of (source, partition) already durably delivered into ``table``."""
        key = CoverageKey(DEFAULT_SINK_ID, source_tag(source, partition), partition)
        return self.coverage(table).ranges(key)

    def write(
        self,
        table: str,
        data: ArrowData,
        *,
        source: str,
        partition: str = "",
        role: Role | None = None,
        descriptions: Descriptions = None,
        tags: TableTags | None = None,
        resume: bool = True,
        offset_column: str | None = None,
        ordering_key: str | None = None,
        mode: WriteMode | str = WriteMode.AUTO,
        replace_key: str | None = None,
        schema: pa.Schema | None = None,
        not_before: dt.datetime | None = None,
        allow_raw_replace: bool = False,
    ) -> WriteResult:
        """Reconcile, skip what coverage already holds, stream pipelined, return once durable.

        ``partition="<key>@<run>"`` names run ``run`` of logical partition ``key`` (``write_modes``), and
        ``mode`` says what a re-run of the partition does (docs/adr/0007-write-modes.md): ``auto`` (the
        default) sends nothing when the input is what an earlier run delivered (``already_delivered``),
        replaces on a derived table, and on primary raw refuses other content before anything is sent
        (``RerunRefusedError``) unless ``allow_raw_replace``; ``replace`` replaces on any table it may;
        ``append`` keeps every run's rows. A replace deletes the partition's older runs once this write's
        rows are durable and visible (``replace_key``: the logical partition, by default ``key``), and
        fails with ``RunSupersededError`` when a newer run holds it. This run re-executed with other
        content (a resume that finds the input changed) writes its next revision (``key@run#2``) and
        replaces the first, where a replace may.

        ``schema``: the input's schema when the caller knows it up front (a declared schema or contract,
        a file's own schema). A write that holds no row still creates a missing table, from ``schema``,
        else from the input's own (a ``Table``, a batch, a file's, or a stream of empty batches), so a
        reader downstream finds an empty table instead of none.

        ``not_before``: no attempt of this (source, partition) began before this time (an orchestrator's
        run start, shared by every retry): a resume then reads only the table's files holding rows
        stamped since (less ``zerobus.coverage.emit_margin_s``), not the table's whole history.

        ``data`` that can be read again (``read_files(...)``, a ``pyarrow.dataset.Dataset``, a Table, a
        batch, a list of batches) is checked whole before its first row is sent, so a bad value anywhere
        refuses the write with nothing sent and no table created or changed; the error names the file
        (or the input) and the row. A stream (a reader, an iterator) is checked as it is sent: if it
        fails part way, the error says how many rows were delivered, at which positions
        (``exc.rows_delivered``, ``exc.delivered``), and that a retry of the same input resumes after
        them (``sink/input_check.py``, ``runtime/failed_write.py``).
        """
        started = time.monotonic()
        name = TableName.parse(table).full_name
        write_mode = WriteMode.parse(mode, where=f"write to {name}")
        run = PartitionRun.of(source, partition)
        policy = rerun_policy(
            write_mode,
            role or self.config.role,
            table=name,
            named=run.named,
            allow_raw_replace=allow_raw_replace,
        )  # a replace of primary raw without the opt-in is refused here, before anything is sent
        if replace_key is not None and policy is not Rerun.KEEP and replace_key != run.key:
            raise ConfigError(
                f"table {name}: a replace of partition {replace_key!r} must write under it, but this write's "
                f"partition is {partition!r}; fix: pass partition='{replace_key}{RUN_SEPARATOR}<run id>'"
            )
        send = Send(
            role=role,
            descriptions=descriptions,
            tags=tags,
            offset_column=offset_column,
            ordering_key=ordering_key,
            not_before=not_before,
            whole=is_in_memory(data),
            schema=schema,
        )
        if policy is Rerun.KEEP:
            return sending.result(self, name, run, self._send(name, data, run, send, resume=resume), started)
        return self._write_run(name, data, run, policy, send, resume=resume, started=started)

    def _write_run(
        self,
        name: str,
        data: ArrowData,
        run: PartitionRun,
        policy: Rerun,
        send: Send,
        *,
        resume: bool,
        started: float,
    ) -> WriteResult:
        """A write of a run of a logical partition: decided against the partition's other runs before
        anything is sent (``lifecycle.decide``), then sent, then (``replace``) superseding older runs."""
        replay = Replay(data)
        try:
            decision = lifecycle.decide(
                self.catalog,
                self.config,
                self.coverage(name),
                name,
                run,
                policy,
                replay,
                resume=resume,
                offset_column=send.offset_column,
                commit=sending.table_commit(self),
                settle=sending.table_settles(self),
            )
            if decision.delivered_by is not None:
                return sending.already_delivered(self, name, decision, run, started)
            if not run.same_run(decision.run):  # the rest of an earlier run: its attempts began before ours
                send = dataclasses.replace(send, not_before=None)
            try:
                # A resume that may yet find its input changed keeps a copy to write the next revision from.
                fallback = policy is Rerun.REPLACE and decision.run.named and decision.resume
                again = replay.again(record=fallback)
                sent = self._send(name, again, decision.run, send, resume=decision.resume)  # type: ignore[arg-type]
            except ResumeMismatchError as exc:
                if policy is not Rerun.REPLACE or not decision.run.named:
                    raise lifecycle.refused_change(name, decision.run, exc) from exc
                revised = decision.run.revised(decision.run.revision + 1)
                log.info("%s: %s: the input changed; writing it as run %s", name, exc.span, revised.partition)
                decision = lifecycle.Decision(revised, decision.start_version, resume=False)
                sent = self._send(name, replay.again(), revised, send, resume=False)  # type: ignore[arg-type]
        finally:
            replay.close()
        if policy is not Rerun.REPLACE:
            return sending.result(self, name, decision.run, sent, started)
        superseded, birth = self._supersede(name, decision.run, decision.start_version)
        return sending.result(self, name, decision.run, sent, started, superseded=superseded, birth=birth)

    def _send(self, name: str, data: ArrowData, run: PartitionRun, send: Send, *, resume: bool) -> Sent:
        """Stream ``data`` as ``run``'s rows until durable (``sending.send``), counted for ``health()``."""
        sent = sending.send(
            self,
            name,
            data,
            run,
            send,
            resume=resume,
            create_when_empty=lambda schema: self._create_when_empty(
                name, schema, send.role, send.descriptions, send.tags, run.source
            ),
        )
        with self._lock:
            self._rows_resent_after_crash += sent.resent_after_crash
        return sent

    def _create_when_empty(
        self,
        name: str,
        schema: pa.Schema | None,
        role: Role | None,
        descriptions: Descriptions,
        tags: TableTags | None,
        source: str,
    ) -> None:
        """An empty write still creates its missing table, as its first batch would have (same gate)."""
        if schema is None or self.catalog.locate(name) is not None:
            return
        untyped = [f.name for f in schema if pa.types.is_null(f.type)]
        if untyped:  # an empty input's columns with no type (e.g. from empty lists): nothing to create from
            log.warning(
                "%s: the write held no row and column(s) %s have no type (Arrow null), so the table was not "
                "created; declare their types (schema=...) to create it from an empty input",
                name,
                untyped,
            )
            return
        self._gate(role, descriptions, tags, source=source).ensure(name, schema)
        log.info("%s: the write held no row; created the table from the input's schema", name)

    def _supersede(
        self, name: str, run: PartitionRun, start_version: int | None
    ) -> tuple[tuple[str, ...], int | None]:
        """The ``replace`` step after the write's flush: delete the older runs, forget their coverage."""
        try:
            done = supersede(
                self.catalog,
                self.config,
                name,
                run=run,
                replace_key=run.key,
                delivered=self.covered(name, source=run.source, partition=run.partition),
                start_version=start_version,
                commit=lambda: self.delta_version(name),  # embedded: commit what the emulator acknowledged
            )
        except RunSupersededError as exc:
            self._forget(name, run.source, (*exc.superseded, *((run.tag,) if exc.deleted_own else ())))
            raise
        self._forget(name, run.source, done.deleted_tags)
        return done.deleted_tags, done.birth_version

    def _forget(self, name: str, source: str, tags: Iterable[str]) -> None:
        """Their rows are gone: a cached range would make read-back wait for rows that will never show."""
        self.coverage(name).forget(
            CoverageKey(DEFAULT_SINK_ID, tag, partition_of_tag(tag, source) or "") for tag in tags
        )

    def latest_runs(self, table: str, *, source: str) -> dict[str, str]:
        """``{logical partition: _twg_source tag}`` of the run a reader takes for each of ``source``'s
        partitions (``lifecycle.latest_runs``): ``write_modes.latest_run_filter(*tags.values())`` reads
        each partition once, also while a newer run is still writing."""
        return lifecycle.latest_runs(
            self.catalog, self.config, TableName.parse(table).full_name, source=source
        )

    def delta_version(self, table: str) -> int | None:
        """The Delta version that holds everything acknowledged so far (``ReadbackService.delta_version``)."""
        return self.readbacks.delta_version(table)

    # -- coverage and read-back (delegated to the read-only ``ReadbackService``) -----------------------

    def coverage(self, table: str) -> CoverageStore:
        name = TableName.parse(table).full_name
        with self._lock:
            return self._coverage_locked(name)

    def coverage_map(
        self, table: str, *, source: str | None = None, partition: str | None = None
    ) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        """Coverage of ``table``, optionally narrowed to one source (and partition)."""
        return self.readbacks.coverage_map(table, source=source, partition=partition)

    def iceberg(self) -> IcebergEndpoint:
        return self.readbacks.iceberg()

    def verify(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
        wait_s: float | None = None,
        force: bool | None = None,
        raise_errors: bool = False,
    ) -> ReadbackOutcome:
        """Wait for Iceberg to show what was delivered, then judge it (``ReadbackService.verify``)."""
        return self.readbacks.verify(
            table,
            source=source,
            partition=partition,
            ranges=ranges,
            wait_s=wait_s,
            force=force,
            raise_errors=raise_errors,
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
        """One non-blocking, judged attempt (``ReadbackService.verify_once``)."""
        return self.readbacks.verify_once(
            table, source=source, partition=partition, ranges=ranges, replaces=replaces
        )

    def read_rows(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        where: Mapping[str, Sequence[Any]] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows of ``table`` (optionally one source/partition) as Arrow, through Iceberg; ``where`` and
        ``columns`` are pushed down to the scan (``ReadbackService.read_rows``)."""
        return self.readbacks.read_rows(
            table, source=source, partition=partition, where=where, columns=columns
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def health(self) -> RuntimeHealth:
        """Liveness and delivery of every pool of this process, as a plain value."""
        with self._lock:
            pools = list(self._pools.values())
        return RuntimeHealth(
            embedded=self.embedded,
            endpoint=getattr(self.transport, "endpoint", None),
            pools=tuple(pool.health() for pool in pools),
            rows_resent_after_crash=self._rows_resent_after_crash,
        )

    def flush(self, timeout: float | None = None) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.flush(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Graceful drain of every pool, then the transport and the embedded emulator. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pools = list(self._pools.values())
            stores = list(self._coverage.values())
        errors: list[str] = []
        for pool in pools:
            try:
                pool.close(timeout)
            except Exception as exc:  # keep draining the other pools; report every failure below
                errors.append(f"{pool.table}: {exc}")
        for store in stores:
            store.close()
        try:
            self.transport.close()
        finally:
            self._stop_emulator()
        if errors:
            log.error("zerobus runtime closed with undelivered data: %s", "; ".join(errors))

    # -- internals ------------------------------------------------------------------------------------

    def _gate(
        self,
        role: Role | None,
        descriptions: Descriptions,
        tags: TableTags | None,
        *,
        source: str | None = None,
    ) -> CatalogGate:
        return CatalogGate(
            self.catalog,
            role or self.config.role,
            descriptions,
            allow_widening=self.config.catalog.allow_widening,
            comment_policy=self.config.catalog.comment_policy,
            tags=tags,
            metrics=self.metrics,
            source=source,  # stamped as twg.source on a table this write creates
            recheck_interval_s=self.config.catalog.precondition_recheck_s,
        )

    def _pool(self, table: str, lane: LaneKind) -> StreamPool:
        with self._lock:
            if self._closed:
                from zerobus_orchestration.errors import SinkClosedError

                raise SinkClosedError(f"{table}: the zerobus runtime of this process is closed")
            pool = self._pools.get((table, lane))
            if pool is None:
                pool = StreamPool(
                    self.transport,
                    table,
                    self.config.pool,
                    lane=lane,
                    recorder=self._recorder_locked(table, lane),
                    metrics=self.metrics,
                )
                self._pools[(table, lane)] = pool
            return pool

    def _recorder_locked(self, table: str, lane: LaneKind) -> CoverageStore:
        """Where ``lane``'s confirmations for ``table`` go: each lane kind commits into its own file, so
        a stalled derived commit never holds the raw lane's (``CoverageStore.derived_lane``)."""
        store = self._coverage_locked(table)
        return store if lane is LaneKind.RAW else store.derived_lane()

    def _coverage_locked(self, table: str) -> CoverageStore:
        """The coverage store of ``table`` (a full name), created on first use; hold ``self._lock``."""
        store = self._coverage.get(table)
        if store is None:
            store = CoverageStore.from_config(self.config, table)
            self._coverage[table] = store
        return store

    def _stop_emulator(self) -> None:
        if self.emulator is not None:
            emulator, self.emulator = self.emulator, None
            if hasattr(self, "readbacks"):  # not yet built when the constructor failed
                self.readbacks.emulator = None
            emulator.stop()
