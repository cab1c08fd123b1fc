"""One run of a write, sent and measured: the send step of ``ZerobusRuntime.write`` and the
``WriteResult`` each write ends in.

``send`` streams a run's rows through a sink over the runtime's long-lived pool (checked before anything
is sent, resumed from coverage or sent whole), waits until they are durable and measures what it
delivered (``Sent``); ``result`` and ``already_delivered`` turn that, or a write that sent nothing, into
the ``WriteResult`` the caller gets. Which run a write sends as, and what a replace deletes afterwards,
is the facade's (``runtime/facade.py``); what sending needs of the runtime is ``Runtime``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

import pyarrow as pa

from zerobus_orchestration.catalog.base import TableCatalog, TableTags
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.contracts import ContractDescriptions
from zerobus_orchestration.coverage import compaction
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import needing_operator, restated
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.resume.pieces import ResumedPieces, resumed_pieces
from zerobus_orchestration.runtime import failed_write
from zerobus_orchestration.runtime.results import WriteResult
from zerobus_orchestration.sink import input_check
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.health import PoolHealth
from zerobus_orchestration.sink.sink import ZerobusSink, is_in_memory
from zerobus_orchestration.write_modes import PartitionRun, source_tag

if TYPE_CHECKING:
    import pyarrow.dataset as pads

    from zerobus_orchestration.files import Rereadable
    from zerobus_orchestration.runtime import lifecycle
    from zerobus_orchestration.runtime.embedded import EmulatorHandle

# The write's log lines, under the logger they had before the send left the facade: callers and tests
# set its level and filter on its name.
log = logging.getLogger("zerobus_orchestration.runtime.facade")

ArrowData: TypeAlias = (
    "pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch] | Rereadable | pads.Dataset"
)
Descriptions: TypeAlias = Mapping[str, str] | ContractDescriptions | None

DEFAULT_SINK_ID = "zerobus-orchestration"


class Runtime(Protocol):
    """What sending a run needs of the runtime (``facade.ZerobusRuntime``): its public face, no more."""

    @property
    def config(self) -> ZerobusConfig: ...

    @property
    def catalog(self) -> TableCatalog: ...

    @property
    def metrics(self) -> SinkMetrics: ...

    @property
    def emulator(self) -> EmulatorHandle | None: ...

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
    ) -> ZerobusSink: ...

    def coverage(self, table: str) -> CoverageStore: ...

    def covered(self, table: str, *, source: str, partition: str = "") -> tuple[OffsetRange, ...]: ...

    def delta_version(self, table: str) -> int | None: ...


@dataclass(frozen=True)
class Send:
    """How a write sends, whichever run it sends as (``write``'s arguments, resolved once)."""

    role: Role | None
    descriptions: Descriptions
    tags: TableTags | None
    offset_column: str | None
    ordering_key: str | None
    not_before: dt.datetime | None
    whole: bool  # in-memory input: checked whole before anything is sent
    schema: pa.Schema | None  # the input's, when known before a row is read


@dataclass(frozen=True)
class Sent:
    """What one run's send delivered, measured."""

    rows: int
    skipped: int
    bytes: int
    payload_bytes: int
    span: OffsetRange
    streams: int
    health: PoolHealth
    resent: int
    resent_after_crash: int


def send(
    runtime: Runtime,
    name: str,
    data: ArrowData,
    run: PartitionRun,
    how: Send,
    *,
    resume: bool,
    create_when_empty: Callable[[pa.Schema | None], None],
) -> Sent:
    """Stream ``data`` as ``run``'s rows (resumed from its coverage, or sent whole), until durable.

    ``create_when_empty``: creates the missing table from the input's schema (when known) after a write
    that held no row, as its first batch would have.
    """
    source, partition = run.source, run.partition
    sink = runtime.sink(
        name,
        source=source,
        partition=partition,
        role=how.role,
        descriptions=how.descriptions,
        tags=how.tags,
        offset_column=how.offset_column,
        ordering_key=how.ordering_key,
    )
    # Checked before anything is sent or created: re-readable input whole, a stream as it is read.
    data, declared = input_check.checked(data, input_check.for_sink(sink, runtime.metrics))
    schema = how.schema if how.schema is not None else declared
    resent_before = sink.pool.rows_possibly_resent  # the pool outlives writes: count this one's only
    skipped = resent_after_crash = 0
    try:
        if resume:
            pieces = _resumed_pieces(
                runtime,
                name,
                data,
                source=source,
                partition=partition,
                offset_column=how.offset_column,
                not_before=how.not_before,
            )
            # In-memory input is checked whole before anything is sent, resumed or not (see ``push``).
            sink.push_positioned(pieces, whole=is_in_memory(data))
            skipped = pieces.rows_read - sink.finish()[0].rows
            resent_after_crash = pieces.rows_resent
            schema = schema if schema is not None else pieces.schema
            _log_resumed(name, source, partition, skipped, pieces)
        else:
            # Sent without a look: a later resume here reads since now.
            runtime.coverage(name).touch(sink.key)
            sink.push(data)
    except Exception as exc:  # a stream stopped part way: say what was delivered, and how to go on
        explained = failed_write.explained(
            what_failed(exc),
            sink,
            lambda: runtime.covered(name, source=source, partition=partition),
            resume=resume,
        )
        if explained is exc:
            raise
        raise explained from exc
    try:
        sink.flush()  # the durability barrier: every confirmation has fired once this returns
    except Exception as exc:
        failure = what_failed(exc)
        if failure is exc:
            raise
        raise failure from exc
    info, span = sink.finish()
    if info.rows == 0 and not skipped:
        create_when_empty(schema)
    health = sink.health()
    store = runtime.coverage(name)
    if sink.pool.lane_kind is LaneKind.DERIVED:
        store = store.derived_lane()  # where this write's lane recorded
    compaction.run_due(store, runtime.config.coverage)  # settled partitions packed
    resent = sink.pool.rows_possibly_resent - resent_before
    if resent:
        log.warning(
            "%s: the write succeeded, but stream(s) reconnected during it (the SDK's recovery or a pool "
            "rebuild) and re-sent up to %d row(s) that may already have been durable: they may be in the "
            "table twice (read-back says duplicated; zerobus-orch repair --dedupe removes them)",
            name,
            resent,
        )
    return Sent(
        info.rows,
        skipped,
        info.bytes,
        info.payload_bytes,
        span,
        info.streams,
        health,
        resent,
        resent_after_crash,
    )


def result(
    runtime: Runtime,
    name: str,
    run: PartitionRun,
    sent: Sent,
    started: float,
    *,
    superseded: tuple[str, ...] = (),
    birth: int | None = None,
) -> WriteResult:
    """The ``WriteResult`` of a write that sent ``sent`` as ``run`` (``superseded``, ``birth``: what its
    replace deleted, and the version its rows became visible at)."""
    health = sent.health
    return WriteResult(
        table=name,
        source=run.source,
        partition=run.partition,
        rows_written=sent.rows,
        rows_skipped=sent.skipped,
        bytes_written=sent.bytes,
        payload_bytes=sent.payload_bytes,
        offset_start=sent.span.start,
        offset_end=sent.span.end,
        streams_used=sent.streams,
        coalesce_ratio_p50=health.coalesce_ratio_p50,
        delivery_latency_p50_s=health.delivery_latency_p50_s,
        delivery_latency_p99_s=health.delivery_latency_p99_s,
        delta_version=runtime.delta_version(name),
        duration_s=time.monotonic() - started,
        rows_possibly_resent=sent.resent,
        rows_resent_after_crash=sent.resent_after_crash,
        superseded_sources=superseded,
        source_tag=run.tag,
        logical_partition=run.key,
        already_delivered=sent.rows == 0 and sent.skipped > 0,
        delivered_by=run.tag if sent.rows or sent.skipped else None,
        run_order_version=birth,
    )


def already_delivered(
    runtime: Runtime, name: str, decision: lifecycle.Decision, run: PartitionRun, started: float
) -> WriteResult:
    """Nothing sent: the input is what run ``decision.delivered_by`` delivered, as the table shows."""
    holder = PartitionRun.of_tag(decision.delivered_by or "", run.source) or run
    held = runtime.coverage(name).ranges(CoverageKey(DEFAULT_SINK_ID, holder.tag, holder.partition))
    rows = decision.rows
    log.info("%s: partition %r: already delivered by run %s; nothing sent", name, run.key, holder.tag)
    return WriteResult(
        table=name,
        source=run.source,
        partition=holder.partition,
        rows_written=0,
        rows_skipped=rows,
        bytes_written=0,
        offset_start=held[0].start if held else 0,
        offset_end=held[-1].end if held else rows,
        streams_used=0,
        payload_bytes=0,
        coalesce_ratio_p50=None,
        delivery_latency_p50_s=None,
        delivery_latency_p99_s=None,
        delta_version=runtime.delta_version(name),
        duration_s=time.monotonic() - started,
        source_tag=holder.tag,
        logical_partition=run.key,
        already_delivered=True,
        delivered_by=holder.tag,
    )


def what_failed(exc: BaseException) -> BaseException:
    """``exc``, or the refused credentials or refused table it carries (``needing_operator``), restated:
    what an orchestrator's retry policy branches on, whatever error of the send or the flush held it."""
    operator = needing_operator(exc)
    return exc if operator is None or operator is exc else restated(operator, str(operator))


def _resumed_pieces(
    runtime: Runtime,
    name: str,
    data: ArrowData,
    *,
    source: str,
    partition: str,
    offset_column: str | None,
    not_before: dt.datetime | None,
) -> ResumedPieces:
    """The pieces of ``data`` a resumed write still sends (``resume.pieces``), this runtime's way."""
    return resumed_pieces(
        _batches(data),
        CoverageKey(DEFAULT_SINK_ID, source_tag(source, partition), partition),
        table=name,
        source=source,
        offset_column=offset_column,
        store=runtime.coverage(name),
        catalog=runtime.catalog,
        config=runtime.config,
        commit=table_commit(runtime),
        settle=table_settles(runtime),
        not_before=not_before,
    )


def _batches(data: input_check.Sendable) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.RecordBatch):
        return (data,)
    if isinstance(data, pa.Table):
        batches: list[pa.RecordBatch] = data.to_batches()
        return batches
    return data


def _log_resumed(name: str, source: str, partition: str, skipped: int, pieces: ResumedPieces) -> None:
    if skipped or pieces.rows_resent:
        log.info(
            "%s: resumed %s %r, skipped %d delivered row(s) (%d on the table's word), re-sent %d "
            "at positions an earlier attempt had reached",
            name,
            source,
            partition,
            skipped,
            pieces.rows_skipped_on_table_word,
            pieces.rows_resent,
        )


def table_commit(runtime: Runtime) -> Callable[[str], object] | None:
    """Has the embedded emulator commit all it acknowledged, before a look at the table (the resume's
    and the partition's runs, ``lifecycle.decide``); None when the service commits on its own."""
    return None if runtime.emulator is None else runtime.emulator.materialize_now


def table_settles(runtime: Runtime) -> bool:
    """Whether a look at the table waits for it to settle (``resume.truth.wait_settled``). An in-process
    emulator is the only one serving this warehouse and commits all it acknowledged on request: nothing
    more can arrive, no settle period to wait out."""
    return not (runtime.emulator is not None and runtime.config.emulator.mode == "in_process")
