"""The process-scoped runtime: everything a Dagster asset or an Airflow task needs, behind one object.

``acquire_runtime(config)`` returns the runtime of this process for that config (the documented
per-process registry, keyed by pid and config hash, refcounted). It owns:

- the transport: the official SDK against Databricks, or against the embedded emulator it starts
  when no endpoint is configured (the embedded default);
- one long-lived ``StreamPool`` per target table (never a stream per batch or per task);
- the catalog (``local`` or ``unity``), called before the first write and on schema drift;
- one coverage store per table, advanced only by the ack lanes;
- read-back through the Iceberg REST catalog.

Correctness never depends on shutdown hooks: ``write`` returns only after the last batch is durable.
The hooks (``atexit`` plus ``multiprocessing.util.Finalize``, which also runs in forked children
that leave through ``os._exit``) only drain streams that a caller left unflushed.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing.util
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from zerobus_orchestration.catalog.base import DesiredTable, ReconcileOutcome, TableCatalog, TableTags
from zerobus_orchestration.catalog.commands import absolute_state_dir, absolute_warehouse, catalog_from_config
from zerobus_orchestration.catalog.gate import CatalogGate
from zerobus_orchestration.catalog.plan import ReconcilePlan
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.contracts import ContractDescriptions
from zerobus_orchestration.coverage import CoverageStore
from zerobus_orchestration.emulator.handle import EmulatorHandle
from zerobus_orchestration.errors import ConfigError, ReadbackError, ReadbackTimeoutError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.preconditions import Condition, check_primary_raw
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback import (
    IcebergEndpoint,
    ReadbackReport,
    VisibilityProbe,
    WaitPolicy,
    read_back,
    verify_readback,
)
from zerobus_orchestration.resume import resume_slices
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.health import PoolHealth
from zerobus_orchestration.sink.pool import StreamPool
from zerobus_orchestration.sink.sink import ZerobusSink, is_in_memory
from zerobus_orchestration.storage import CredentialCache, config_storage_options
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.transport.base import Transport

if TYPE_CHECKING:
    from zerobus_orchestration.emulator.server import Emulator

log = logging.getLogger(__name__)

ArrowData: TypeAlias = pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]
Descriptions: TypeAlias = Mapping[str, str] | ContractDescriptions | None

DEFAULT_SINK_ID = "zerobus-orchestration"


def source_tag(source: str, partition: str = "") -> str:
    """The ``_twg_source`` value of a write: the source, qualified by its partition when it has one.

    Rows carry no partition column, so two partitions of one source must differ in ``_twg_source``
    for read-back to tell their row positions apart. A source containing ``[`` is refused: source
    ``a[b]`` would be indistinguishable from source ``a`` with partition ``b``.
    """
    if "[" in source:
        raise ConfigError(
            f"source {source!r} contains '[', which starts the partition suffix in _twg_source "
            "(source[partition]); fix: rename the source, and pass any partition as partition="
        )
    return f"{source}[{partition}]" if partition else source


class NothingToVerifyError(ReadbackError):
    """Read-back found no delivered coverage to verify (nothing written yet for that source)."""


@dataclass(frozen=True)
class WriteResult:
    """What one ``write`` delivered, measured (never assumed)."""

    table: str
    source: str
    partition: str
    rows_written: int
    rows_skipped: int
    bytes_written: int
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RuntimeHealth:
    """Every pool's ``PoolHealth``; what Dagster metadata and Airflow task logs render."""

    embedded: bool
    endpoint: str | None
    pools: tuple[PoolHealth, ...]

    @property
    def healthy(self) -> bool:
        return all(pool.healthy or pool.submitted == 0 for pool in self.pools)

    def as_dict(self) -> dict[str, Any]:
        return {
            "embedded": self.embedded,
            "endpoint": self.endpoint,
            "healthy": self.healthy,
            "pools": [pool.as_dict() for pool in self.pools],
        }


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
        self.credentials = credentials if credentials is not None else _build_credentials(config)
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, LaneKind], StreamPool] = {}
        self._coverage: dict[str, CoverageStore] = {}
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
        try:
            self.catalog: TableCatalog = catalog_from_config(config)
            if transport is None and config.embedded:
                self.emulator = _start_emulator(config, self.credentials)
            self.transport: Transport = transport or _build_transport(config, self.emulator)
        except BaseException:
            self._stop_emulator()
            raise

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
    ) -> WriteResult:
        """Reconcile, skip what coverage already holds, stream pipelined, return once durable."""
        started = time.monotonic()
        name = TableName.parse(table).full_name
        sink = self.sink(
            name,
            source=source,
            partition=partition,
            role=role,
            descriptions=descriptions,
            tags=tags,
            offset_column=offset_column,
            ordering_key=ordering_key,
        )
        resent_before = sink.pool.rows_possibly_resent  # the pool outlives writes: count this one's only
        covered = self.covered(name, source=source, partition=partition) if resume else ()
        skipped = 0
        if covered:
            counted = _RowCounter(_batches(data))
            key = CoverageKey(DEFAULT_SINK_ID, source_tag(source, partition), partition)
            # The recorded content digests let the resume refuse, before sending, an input that changed.
            pieces = resume_slices(
                covered,
                counted,
                offset_column=offset_column,
                table=name,
                digests=self.coverage(name).digests(key),
                source=source,
                partition=partition,
            )
            # In-memory input is checked whole before anything is sent, resumed or not (see ``push``).
            sink.push_positioned(
                ((p.batch, None if offset_column else p.start_offset) for p in pieces),
                whole=is_in_memory(data),
            )
            skipped = counted.rows - sink.finish()[0].rows
            log.info("%s: resumed %s %r, skipped %d delivered row(s)", name, source, partition, skipped)
        else:
            sink.push(data)
        sink.flush()  # the durability barrier: every confirmation has fired once this returns
        info, span = sink.finish()
        health = sink.health()
        resent = sink.pool.rows_possibly_resent - resent_before
        if resent:
            log.warning(
                "%s: the write succeeded, but the SDK reconnected stream(s) during it and re-sent up to %d "
                "row(s) that may already have been durable: they may be in the table twice (read-back "
                "counts duplicates)",
                name,
                resent,
            )
        return WriteResult(
            table=name,
            source=source,
            partition=partition,
            rows_written=info.rows,
            rows_skipped=skipped,
            bytes_written=info.bytes,
            offset_start=span.start,
            offset_end=span.end,
            streams_used=info.streams,
            coalesce_ratio_p50=health.coalesce_ratio_p50,
            delivery_latency_p50_s=health.delivery_latency_p50_s,
            delivery_latency_p99_s=health.delivery_latency_p99_s,
            delta_version=self.delta_version(name),
            duration_s=time.monotonic() - started,
            rows_possibly_resent=resent,
        )

    def delta_version(self, table: str) -> int | None:
        """The Delta version that holds everything acknowledged so far (embedded), else the live one.

        Embedded: the emulator commits its write-ahead log now, so the version returned contains every
        acknowledged row. Production: Zerobus commits asynchronously (time to table, P50 <= 5 s), so
        the version read from the catalog is a lower bound.
        """
        name = TableName.parse(table).full_name
        if self.catalog.describe(name) is None:
            return None
        if self.emulator is not None:
            version = self.emulator.materialize_now(name)
            if version is not None:
                return int(version)
        # Nothing was left to commit: the emulator's own materialiser got there first. Read the
        # version after that, not before, or a concurrent commit would be missed.
        state = self.catalog.describe(name)
        return None if state is None else state.version

    # -- coverage and read-back -----------------------------------------------------------------------

    def coverage(self, table: str) -> CoverageStore:
        name = TableName.parse(table).full_name
        with self._lock:
            return self._coverage_locked(name)

    def coverage_map(
        self, table: str, *, source: str | None = None, partition: str | None = None
    ) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        """Coverage of ``table``, optionally narrowed to one source (and partition)."""
        everything = self.coverage(table).all_for_table()
        if source is None:
            return everything
        if partition is not None:
            wanted = source_tag(source, partition)
            return {key: spans for key, spans in everything.items() if key.source == wanted}
        return {
            key: spans
            for key, spans in everything.items()
            if key.source == source or key.source.startswith(f"{source}[")
        }

    def iceberg(self) -> IcebergEndpoint:
        default_uri = None if self.emulator is None else self.emulator.iceberg_rest_uri
        if default_uri is None and self.config.workspace_url:
            default_uri = self.config.workspace_url.rstrip("/") + "/api/2.1/unity-catalog/iceberg-rest"
        endpoint = IcebergEndpoint.from_config(self.config.readback, default_uri=default_uri)
        if self.emulator is not None and endpoint.token is None and endpoint.uri == default_uri:
            # The emulator's Iceberg REST facade requires a credential, like Unity Catalog's.
            token = self.emulator.access_token()
            endpoint = IcebergEndpoint(uri=endpoint.uri, token=token, properties=endpoint.properties)
        return endpoint

    def readback(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        wait_s: float | None = None,
        force: bool | None = None,
    ) -> ReadbackReport:
        """Wait for Iceberg to reflect what was delivered, then verify coverage against the scan."""
        name = TableName.parse(table).full_name
        cfg = self.config.readback
        policy = WaitPolicy.from_config(cfg)
        if wait_s is not None:
            policy = WaitPolicy(timeout_s=wait_s, initial_s=min(policy.initial_s, wait_s), max_s=policy.max_s)
        coverage = self.coverage_map(name, source=source, partition=partition)
        if not coverage:
            scope = (
                ""
                if source is None
                else f" for source {source!r}" + ("" if partition is None else f" partition {partition!r}")
            )
            raise NothingToVerifyError(
                f"read-back of {name}: no delivered coverage{scope}, so there is nothing to verify yet; "
                "write first, or check the table, --source and --partition"
            )
        expected = self.delta_version(name)
        return verify_readback(
            self.iceberg(),
            name,
            coverage,
            probe=self._visibility_probe(),
            delta_version=expected if expected is not None else 0,
            policy=policy,
            force=cfg.force_metadata if force is None else force,
        )

    def readback_once(
        self, table: str, *, source: str | None = None, partition: str | None = None
    ) -> ReadbackReport | None:
        """One non-blocking attempt: ``None`` while Iceberg has not caught up (sensors, triggers).

        ``NothingToVerifyError`` propagates: no coverage is not "not yet" (waiting never creates it), so
        the caller decides whether that is an empty write (done) or a wrong table/source/partition.
        """
        try:
            return self.readback(table, source=source, partition=partition, wait_s=0.001, force=False)
        except ReadbackTimeoutError:
            return None

    def read_back(self, table: str, *, source: str | None = None, partition: str | None = None) -> pa.Table:
        """Rows of ``table`` (optionally one source/partition) as Arrow, through Iceberg."""
        name = TableName.parse(table).full_name
        endpoint = self.iceberg()
        if source is None:
            return endpoint.load_table(name).scan().to_arrow()
        return read_back(name, source=source_tag(source, partition or ""), endpoint=endpoint)

    # -- lifecycle ------------------------------------------------------------------------------------

    def health(self) -> RuntimeHealth:
        """Liveness and delivery of every pool of this process, as a plain value."""
        with self._lock:
            pools = list(self._pools.values())
        return RuntimeHealth(
            embedded=self.embedded,
            endpoint=getattr(self.transport, "endpoint", None),
            pools=tuple(pool.health() for pool in pools),
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

    def _visibility_probe(self) -> VisibilityProbe | None:
        """How read-back learns which Delta version Iceberg reflects.

        Unity Catalog reports UniForm's ``converted_delta_version`` on the table (its Iceberg snapshots
        carry no Delta version); ``None`` selects the embedded mirror's snapshot-summary probe.
        """
        probe = getattr(self.catalog, "visibility_probe", None)
        return None if probe is None else probe()  # type: ignore[no-any-return]

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
                    recorder=self._coverage_locked(table),
                    metrics=self.metrics,
                )
                self._pools[(table, lane)] = pool
            return pool

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
            emulator.stop()


def _batches(data: ArrowData) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.RecordBatch):
        return (data,)
    if isinstance(data, pa.Table):
        batches: list[pa.RecordBatch] = data.to_batches()
        return batches
    return data


class _RowCounter:
    """Counts the rows of a batch stream as it is consumed (how many a resumed write skipped)."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = batches
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch


def _build_credentials(config: ZerobusConfig) -> CredentialCache | None:
    """The read-back credential cache ``zerobus.credential_vending`` asks for (embedded ``s3://`` only)."""
    if not (config.credential_vending.enabled and config.embedded):
        return None
    from zerobus_orchestration.catalog.s3_vending import S3CredentialVendor

    margin = timedelta(seconds=config.credential_vending.refresh_margin_s)
    return CredentialCache(S3CredentialVendor.from_config(config), margin=margin)


def _start_emulator(config: ZerobusConfig, credentials: CredentialCache | None = None) -> EmulatorHandle:
    if config.emulator.mode == "daemon":  # one shared emulator process per warehouse, found or started
        from zerobus_orchestration.emulator.launcher import connect_daemon

        return connect_daemon(config)
    return start_in_process_emulator(config, credentials)


def start_in_process_emulator(config: ZerobusConfig, credentials: CredentialCache | None = None) -> Emulator:
    """The embedded emulator in this process (also what the shared daemon runs)."""
    from zerobus_orchestration.emulator.iceberg_mirror import ICEBERG_DB_NAME
    from zerobus_orchestration.emulator.private import with_warehouse_secret
    from zerobus_orchestration.emulator.server import Emulator

    # SQLite and the fsync'd WAL need local disk, even for an s3:// warehouse.
    state = absolute_state_dir(config)
    emulator = Emulator(
        absolute_warehouse(config.warehouse),
        with_warehouse_secret(config).emulator,  # never the well-known default secret
        storage_options=config_storage_options(config) or None,
        wal_dir=os.path.join(state, "wal"),
        iceberg_db=os.path.join(state, ICEBERG_DB_NAME),
        credentials=credentials,
    )
    emulator.start()
    log.info("embedded Zerobus emulator at %s (warehouse %s)", emulator.endpoint, config.warehouse)
    return emulator


def _build_transport(config: ZerobusConfig, emulator: EmulatorHandle | None) -> Transport:
    from zerobus_orchestration.transport.sdk import SdkTransport

    if emulator is not None:  # the warehouse's own client secret; a dead shared daemon is replaced
        from zerobus_orchestration.emulator.daemon_transport import emulator_transport

        return emulator_transport(config, emulator)
    return SdkTransport.from_config(config)


# -- the documented per-process registry ------------------------------------------------------------

_registry_lock = threading.Lock()
_runtimes: dict[tuple[int, str], tuple[ZerobusRuntime, int]] = {}
_hooked_pid: int | None = None


def acquire_runtime(config: ZerobusConfig) -> ZerobusRuntime:
    """This process's runtime for ``config``, created on first use; refcounted."""
    key = (os.getpid(), config.config_hash())
    with _registry_lock:
        _install_exit_hooks()
        entry = _runtimes.get(key)
        if entry is None:
            runtime = ZerobusRuntime(config)
            _runtimes[key] = (runtime, 1)
            return runtime
        runtime, count = entry
        _runtimes[key] = (runtime, count + 1)
        return runtime


def running_runtime(config: ZerobusConfig) -> ZerobusRuntime | None:
    """This process's runtime for ``config`` if one is running; never starts one (progress displays)."""
    with _registry_lock:
        entry = _runtimes.get((os.getpid(), config.config_hash()))
    return None if entry is None else entry[0]


def release_runtime(config: ZerobusConfig) -> None:
    """Drop one reference. The runtime stays: it is meant to outlive a step, a task try or a tick."""
    key = (os.getpid(), config.config_hash())
    with _registry_lock:
        entry = _runtimes.get(key)
        if entry is not None:
            runtime, count = entry
            _runtimes[key] = (runtime, max(0, count - 1))


def close_all_runtimes() -> None:
    """Drain and close every runtime of this process. Idempotent; safe at exit."""
    pid = os.getpid()
    with _registry_lock:
        mine = [key for key in _runtimes if key[0] == pid]
        runtimes = [_runtimes.pop(key)[0] for key in mine]
    for runtime in runtimes:
        try:
            runtime.close()
        except Exception as exc:  # at exit, close every runtime rather than stop at the first
            log.error("closing zerobus runtime: %s", exc)


def _install_exit_hooks() -> None:
    """Once per process, lazily: ``_bootstrap`` of a forked child clears finalizers it inherited.

    Three hooks, because each exit path runs a different one: ``threading._register_atexit`` runs
    before interpreter shutdown joins thread-pool workers (the embedded emulator's gRPC workers block
    in open streams until the runtime closes them, so plain ``atexit`` would never be reached);
    ``atexit`` covers the main process and spawned children; ``Finalize`` covers fork/forkserver
    children, which leave through ``os._exit``.
    """
    global _hooked_pid
    if _hooked_pid == os.getpid():
        return
    register_early = getattr(threading, "_register_atexit", None)
    if register_early is not None:
        with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
            register_early(close_all_runtimes)
    atexit.register(close_all_runtimes)
    multiprocessing.util.Finalize(None, close_all_runtimes, exitpriority=100)
    _hooked_pid = os.getpid()


def _forget_inherited() -> None:
    # A forked child must not touch its parent's streams: their threads do not survive fork.
    _runtimes.clear()


os.register_at_fork(after_in_child=_forget_inherited)
