"""``ZerobusIOManager``: asset outputs appended to Delta tables through Zerobus, inputs read back via Iceberg.

A plain ``ConfigurableIOManagerFactory``, not ``DbIOManager``: Zerobus is append-only and write-only,
so there is no delete-then-write and no read through the same connection
(docs/adr/0001-append-only-semantics.md).
Naming follows the DB IO managers (see ``naming.py``).

``handle_output`` is the durability barrier: it returns only after the last batch of the output is
durable (``runtime.write``), because errors in resource teardown never fail a run. Each run appends its
own coverage (``partition = "<key>@<root run id>"``); a retried step of the same run, a re-execution of
it and a read-back recovery run resume from coverage instead of sending its rows twice (``naming.py``).

No ``from __future__ import annotations``: Dagster resolves these annotations at runtime.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from dagster_defs.drift import SCHEMA_CHANGES, contract_of, describe_changes
from dagster_defs.failures import for_good
from dagster_defs.handlers import (
    ArrowTypeHandler,
    ZerobusTypeHandler,
    default_type_handlers,
    handler_for_load,
    handler_for_output,
)
from dagster_defs.latest_run import latest_tags, select_latest_runs
from dagster_defs.metadata import KEY_SOURCE_TAG, table_uri, write_metadata
from dagster_defs.naming import META_WRITE_MODE, AssetOptions, TableRef, source_for, table_ref
from dagster_defs.output_partition import (
    attempts_began,
    coverage_partition,
    is_range_run,
    partition_label,
    refuse_range_replace,
)
from dagster_defs.output_table import (
    create_if_missing,
    ready_table,
    refuse_inferred_creation,
    role_and_descriptions,
)
from dagster_defs.resource import ZerobusResource
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import (
    NothingToVerifyError,
    PlanRefusedError,
    RerunRefusedError,
    RunSupersededError,
    WriteBoundaryError,
)
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
from zerobus_orchestration.reserved import SOURCE as SOURCE_COLUMN
from zerobus_orchestration.reserved import is_reserved
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.results import WriteResult
from zerobus_orchestration.write_modes import WriteMode, replaces_runs

SUPERSEDED = "zerobus/superseded_runs"  # output metadata of a replace write: the runs whose rows it deleted
SUPERSEDED_BY = "zerobus/superseded_by"  # failure metadata of a replace run a newer run of its partition won
ALREADY_DELIVERED = "zerobus/already_delivered"  # nothing sent: the table held the output already
DELIVERED_BY = "zerobus/delivered_by"  # the run whose rows hold the output (this one, or an earlier one)
LOGICAL_PARTITION = "zerobus/logical_partition"  # the partition the write is a run of


@dataclass(frozen=True)
class _Pushdown:
    where: dict[str, list[str]] | None
    columns: list[str] | None


class ZerobusIOManager(dg.ConfigurableIOManagerFactory):  # type: ignore[type-arg]
    """Appends asset outputs to ``<catalog>.<schema>.<table>`` through Zerobus; reads inputs back via Iceberg.

    Accepts ``pyarrow.Table`` / ``RecordBatch`` / ``RecordBatchReader``, pandas and polars frames (extras).

    .. code-block:: python

        zerobus = ZerobusResource()                        # embedded emulator on ./.zerobus/warehouse
        defs = dg.Definitions(
            assets=[orders],
            resources={"io_manager": ZerobusIOManager(zerobus=zerobus, catalog="main")},
        )

        @dg.asset(key=["raw", "orders"])                   # -> main.raw.orders
        def orders() -> pa.Table: ...

        @dg.asset(metadata={"zerobus/table": "main.sales.daily_totals"})   # explicit name
        def totals(orders: pa.Table) -> pa.Table: ...

    Per-asset definition metadata: ``zerobus/table`` (table or full name), ``schema`` / ``zerobus/schema``,
    ``zerobus/role`` (``primary_raw`` | ``derived``), ``partition_expr`` (column holding the partition key,
    used to filter partitioned inputs), ``dagster/column_schema`` (column descriptions become comments),
    ``zerobus/write_mode`` (``auto`` | ``append`` | ``replace``, over the manager's ``write_mode``) says
    what re-materialising a partition does (docs/adr/0007-write-modes.md): ``auto``, the default, writes
    nothing when the output is what the table holds (``zerobus/already_delivered``), replaces a derived
    table's partition and refuses other content on primary raw before anything is sent unless
    ``zerobus/allow_raw_replace`` (over the manager's ``allow_raw_replace``); ``replace`` replaces the
    partition once its rows are visible; ``append`` adds every run's rows. Inputs of an asset whose runs
    replace each other read only the run each partition's latest materialisation names
    (``latest_run.py``), never a newer run still writing or not yet past its delete.

    A table with a contract is created and evolved from the contract before anything is sent, whether or
    not the contract asset is in the run (``contract_definition.py``), never from the output's inferred
    schema, and output columns the contract does not declare are refused; without one, columns a write
    adds are logged and listed as ``zerobus/schema_changes`` (``drift.py``). pandas named index levels
    are written as columns. An empty output still creates the table, and loads as an empty input
    downstream.
    """

    zerobus: ZerobusResource = Field(description="The Zerobus resource whose runtime writes and reads.")
    catalog: str = Field(
        default="main", description="Unity Catalog catalog of every table this manager writes."
    )
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="Schema for every table; default: the asset key prefix, else 'default'. "
        "Definition metadata 'schema' wins.",
    )
    role: Role | None = Field(
        default=None,
        description="Table role when the asset does not set zerobus/role: primary_raw or derived. "
        "Default: the core config's role.",
    )
    include_reserved_columns: bool = Field(
        default=False,
        description="Keep the engine-owned _twg_* columns in loaded inputs.",
    )
    wait_for_readback: bool = Field(
        default=True,
        description="Before loading an input, wait (up to readback.wait_timeout_s) until Iceberg shows "
        "everything delivered for the upstream asset.",
    )
    write_mode: WriteMode = Field(
        default=WriteMode.AUTO,
        description="What re-materialising a partition (the whole table for an unpartitioned asset) does. "
        "auto (the default): nothing is written when the output is what the table holds; other content "
        "replaces a derived table's partition and is refused on primary_raw before anything is sent. "
        "replace: the run's rows replace the partition's older runs once durable and visible. append: "
        "every run adds its rows. Definition metadata zerobus/write_mode wins.",
    )
    allow_raw_replace: bool = Field(
        default=False,
        description="Let a re-run with other content replace a primary_raw partition (auto and replace). "
        "Definition metadata zerobus/allow_raw_replace wins.",
    )

    @staticmethod
    def type_handlers() -> Sequence[ZerobusTypeHandler]:
        return default_type_handlers()

    @staticmethod
    def default_load_type() -> type | None:
        return pa.Table

    def create_io_manager(self, context: dg.InitResourceContext) -> "ZerobusIO":
        handlers = list(self.type_handlers())
        default = next((h for h in handlers if h.handles_load(self.default_load_type())), ArrowTypeHandler())
        return ZerobusIO(
            zerobus=self.zerobus,
            catalog=self.catalog,
            schema=self.schema_,
            role=self.role,
            handlers=handlers,
            default_handler=default,
            include_reserved_columns=self.include_reserved_columns,
            wait_for_readback=self.wait_for_readback,
            write_mode=self.write_mode,
            allow_raw_replace=self.allow_raw_replace,
        )


class ZerobusPandasIOManager(ZerobusIOManager):
    """``ZerobusIOManager`` loading unannotated inputs as pandas DataFrames."""

    @staticmethod
    def default_load_type() -> type | None:
        import pandas as pd

        return pd.DataFrame


class ZerobusPolarsIOManager(ZerobusIOManager):
    """``ZerobusIOManager`` loading unannotated inputs as polars DataFrames."""

    @staticmethod
    def default_load_type() -> type | None:
        import polars as pl

        return pl.DataFrame  # type: ignore[no-any-return]


def _asset_key(context: dg.OutputContext | dg.InputContext) -> dg.AssetKey:
    if context.has_asset_key:
        return context.asset_key
    # An op output (no asset): the output name is the table, like the DB IO managers.
    return dg.AssetKey([context.name or "output"])


def _landed_note(rt: ZerobusRuntime, table: str, source: str, partition: str, mode: WriteMode) -> str:
    """What a failed write left in the table and how to go on: appended rows are not rolled back."""
    try:
        landed = sum(r.end - r.start for r in rt.covered(table, source=source, partition=partition))
    except Exception as exc:  # the note must never hide the failure it explains
        return f"zerobus: could not count the rows this write delivered to {table}: {exc}"
    if mode is not WriteMode.APPEND:
        return (
            f"zerobus: {landed} row(s) landed in {table} before the failure (source {source!r}, partition "
            f"{partition!r}); the partition's earlier runs' rows were kept. To resume, re-execute this run "
            "(from failure or all steps; a step retry does this too): it sends only the missing rows, then "
            f"replaces where write_mode='{mode.value}' replaces (a derived table, or allow_raw_replace). A "
            "new run of the partition with the same output sends only what is missing on primary raw and "
            "replaces a derived partition (write_mode='auto'; write_mode='replace' on any table it may)."
        )
    return (
        f"zerobus: {landed} row(s) landed in {table} before the failure (source {source!r}, partition "
        f"{partition!r}) and stay there (write_mode=append). To resume, re-execute this run (from failure "
        "or all steps; a step retry does this too): it sends only the missing rows. A new run of the same "
        "partition appends all its rows again; write_mode='auto' makes a new run with the same output send "
        "only what is missing."
    )


def _drain_quietly(rt: ZerobusRuntime, context: dg.OutputContext) -> None:
    try:
        rt.flush()
    except Exception as exc:  # the original failure is what the step must report
        context.log.warning(f"zerobus: draining after a failed write also failed: {exc}")


@contextmanager
def _failure_explained(
    rt: ZerobusRuntime, context: dg.OutputContext, table: str, source: str, partition: str, mode: WriteMode
) -> Iterator[None]:
    """Bad input and refused plans fail the step for good, naming table and column; any other failure
    drains what is in flight and says what the write left in the table."""
    try:
        yield
    except WriteBoundaryError as exc:
        # Bad input: retrying cannot help. Name table and column in the step failure.
        raise dg.Failure(
            description=str(exc),
            metadata={"table": exc.table, "column": exc.column, "kind": exc.kind},
            allow_retries=False,
        ) from exc
    except PlanRefusedError as exc:
        raise dg.Failure(
            description=str(exc),
            metadata={"table": table, "reasons": dg.MetadataValue.json(list(exc.reasons))},
            allow_retries=False,
        ) from exc
    except RerunRefusedError as exc:
        # Primary raw given other content for a partition it holds: nothing was sent, a retry is the same.
        raise dg.Failure(
            description=str(exc),
            metadata={"table": exc.table, "partition": exc.partition, "zerobus/existing_run": exc.existing},
            allow_retries=False,
        ) from exc
    except RunSupersededError as exc:
        # A newer run of the partition holds it (the table's order): a retry of this one cannot win.
        raise dg.Failure(
            description=str(exc),
            metadata={
                "table": exc.table,
                KEY_SOURCE_TAG: exc.run,
                SUPERSEDED_BY: exc.winner,
                SUPERSEDED: dg.MetadataValue.json(list(exc.superseded)),
            },
            allow_retries=False,
        ) from exc
    except Exception as exc:
        # The output failed part-way (e.g. its generator raised). Drain what is in flight so
        # coverage holds every acknowledged row before a retry of this step resumes from it.
        _drain_quietly(rt, context)
        note = _landed_note(rt, table, source, partition, mode)
        failure = for_good(exc)  # refused credentials or table: a retry would fail the same way
        if failure is not None:
            failure.add_note(note)
            raise failure from exc
        exc.add_note(note)
        raise


def _record_run(context: dg.OutputContext, result: WriteResult, table: str, replaced: bool) -> None:
    """Which run holds the output (the sensor verifies it, inputs read it) and how it got there."""
    meta: dict[str, Any] = {
        KEY_SOURCE_TAG: result.source_tag,
        LOGICAL_PARTITION: result.logical_partition,
        ALREADY_DELIVERED: result.already_delivered,
    }
    if replaced:  # the sensor's read-back then checks the older runs are gone
        meta[META_WRITE_MODE] = WriteMode.REPLACE.value
    if result.delivered_by:
        meta[DELIVERED_BY] = result.delivered_by
    context.add_output_metadata(meta)
    if result.already_delivered:
        context.log.info(
            f"{table}: partition {partition_label(context) or '(whole table)'!r} already delivered by run "
            f"{result.delivered_by}: nothing sent"
        )
    if result.superseded_sources:
        context.log.info(
            f"{table}: replaced partition {partition_label(context) or '(whole table)'!r}; "
            f"deleted the rows of {list(result.superseded_sources)}"
        )
        context.add_output_metadata({SUPERSEDED: dg.MetadataValue.json(list(result.superseded_sources))})


def _record_write(
    context: dg.OutputContext,
    rt: ZerobusRuntime,
    result: WriteResult,
    table: str,
    schema: pa.Schema,
    descriptions: dict[str, str],
    *,
    where: str,
) -> None:
    try:
        cfg = rt.config
        uri = table_uri(
            warehouse=cfg.warehouse,
            full_name=table,
            embedded=cfg.embedded,
            workspace_url=cfg.workspace_url,
        )
        context.add_output_metadata(
            write_metadata(
                result,
                full_name=table,
                schema=schema,
                descriptions=descriptions,
                uri=uri,
                partitioned=context.has_asset_partitions,
            )
        )
    except Exception as exc:  # the rows are durable; statistics must never fail the write
        context.log.warning(f"{where}: could not build Zerobus output metadata: {exc}")


class ZerobusIO(dg.IOManager):
    def __init__(
        self,
        *,
        zerobus: ZerobusResource,
        catalog: str,
        schema: str | None,
        role: Role | None,
        handlers: Sequence[ZerobusTypeHandler],
        default_handler: ZerobusTypeHandler,
        include_reserved_columns: bool,
        wait_for_readback: bool,
        write_mode: WriteMode = WriteMode.AUTO,
        allow_raw_replace: bool = False,
    ) -> None:
        self._zerobus = zerobus
        self._catalog = catalog
        self._schema = schema
        self._role = role
        self._handlers = handlers
        self._default = default_handler
        self._include_reserved = include_reserved_columns
        self._wait_for_readback = wait_for_readback
        self._write_mode = write_mode
        self._allow_raw_replace = allow_raw_replace

    def _ref(self, key: dg.AssetKey, options: AssetOptions) -> TableRef:
        return table_ref(key, catalog=self._catalog, schema=self._schema, options=options)

    # -- write -----------------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        key = _asset_key(context)
        where = f"asset {key.to_user_string()}"
        if obj is None:
            context.log.warning(f"{where} returned None; nothing was written to Zerobus")
            return
        options = AssetOptions.from_metadata(context.definition_metadata, where=where)
        table = self._ref(key, options).full_name
        data = handler_for_output(self._handlers, obj, where=where).to_arrow(obj)
        source = source_for(key)
        partition = coverage_partition(context, source)
        rt = self._zerobus.runtime
        contract = contract_of(context, key)
        mode = options.write_mode or self._write_mode
        allow_raw = (
            self._allow_raw_replace if options.allow_raw_replace is None else options.allow_raw_replace
        )
        if mode is WriteMode.REPLACE:
            refuse_range_replace(context, key, table)
        elif mode is WriteMode.AUTO and is_range_run(context):
            mode = WriteMode.APPEND  # a range run is not a run of any one partition: it appends, as before
        role, descriptions = role_and_descriptions(
            context.definition_metadata, data.schema, contract, options.role or self._role
        )
        if contract is None:
            refuse_inferred_creation(rt, table, context, key)
        with _failure_explained(rt, context, table, source, partition, mode):
            changes = ready_table(rt, table, data.schema, contract, role, context)
            result = rt.write(
                table,
                data,
                source=source,
                partition=partition,
                descriptions=descriptions or None,
                role=role,
                mode=mode,
                replace_key=partition_label(context) or "",
                not_before=attempts_began(context, source),
                allow_raw_replace=allow_raw,
            )
            if contract is None and result.rows_written == 0 and result.rows_skipped == 0:
                # No batch was sent, so the sink never reconciled: an empty first write still creates
                # the table, so downstream reads find it (a contracted table exists already).
                create_if_missing(rt, table, data.schema, role)
        replaced = replaces_runs(mode, role or rt.config.role, allow_raw_replace=allow_raw)
        _record_run(context, result, table, replaced)
        if changes:
            context.log.warning(describe_changes(table, changes))
            context.add_output_metadata({SCHEMA_CHANGES: dg.MetadataValue.json(changes)})
        _record_write(context, rt, result, table, data.schema, descriptions, where=where)

    # -- read ------------------------------------------------------------------------------------

    def load_input(self, context: dg.InputContext) -> Any:
        key = _asset_key(context)
        where = f"input {context.name!r} (asset {key.to_user_string()})"
        upstream_meta = context.upstream_output.definition_metadata if context.upstream_output else None
        options = AssetOptions.from_metadata(upstream_meta, where=where)
        ref = self._ref(key, options)
        load_type = context.dagster_type.typing_type if context.dagster_type else None
        handler = handler_for_load(self._handlers, load_type, self._default, where=where)
        rt = self._zerobus.runtime
        pushdown = self._pushdown(context, rt, ref.full_name, options)
        table = self._read(context, rt, ref.full_name, source_for(key), pushdown, where=where)
        if self._replaces(options, rt):
            table = self._latest_runs(context, table, key, ref.full_name, where=where)
        table = self._select(context, table, options, where=where)
        return handler.from_arrow(table, load_type)

    def _pushdown(
        self, context: dg.InputContext, rt: ZerobusRuntime, name: str, options: AssetOptions
    ) -> _Pushdown:
        """What the Iceberg scan itself can filter and project (as dagster-deltalake pushes a partition
        filter down): the input's partition keys on ``partition_expr`` when the column takes them as
        they are (text, a date, an integer), and the ``columns`` asked for plus what the selection after
        the read needs. ``_select`` still filters exactly what it did; the scan reads less."""
        state = rt.catalog.describe(name)
        if state is None:
            return _Pushdown(None, None)  # _read says the table is missing
        schema = state.arrow_schema()
        wanted = (context.definition_metadata or {}).get("columns")
        columns: list[str] | None = None
        if wanted:
            listed = wanted.value if isinstance(wanted, dg.MetadataValue) else wanted
            needed = [*(str(c) for c in listed), SOURCE_COLUMN]
            needed += [options.partition_expr] if options.partition_expr else []
            if all(schema.get_field_index(c) >= 0 for c in needed):
                columns = list(dict.fromkeys(needed))  # else _select names what is missing
        column = options.partition_expr
        if not (context.has_asset_partitions and column) or schema.get_field_index(column) < 0:
            return _Pushdown(None, columns)
        kind = schema.field(column).type
        as_given = (pa.types.is_string, pa.types.is_large_string, pa.types.is_date, pa.types.is_integer)
        if not any(test(kind) for test in as_given):
            return _Pushdown(None, columns)  # the keys are text: only _select compares them as such
        return _Pushdown({column: list(context.asset_partition_keys)}, columns)

    def _replaces(self, options: AssetOptions, rt: ZerobusRuntime) -> bool:
        """Whether the upstream's runs of a partition replace each other (its inputs read one run each)."""
        allow_raw = (
            self._allow_raw_replace if options.allow_raw_replace is None else options.allow_raw_replace
        )
        role = options.role or self._role or rt.config.role
        return replaces_runs(options.write_mode or self._write_mode, role, allow_raw_replace=allow_raw)

    def _read(
        self,
        context: dg.InputContext,
        rt: ZerobusRuntime,
        name: str,
        source: str,
        pushdown: _Pushdown,
        *,
        where: str,
    ) -> pa.Table:
        if not self._wait_for_readback:
            return rt.read_rows(name, where=pushdown.where, columns=pushdown.columns)
        try:
            # Iceberg metadata lags the Delta commit; block until the upstream's rows are visible.
            _require_visible(rt.verify(name, source=source, raise_errors=True), where)
        except NothingToVerifyError:
            # The upstream delivered no rows (an empty write, which still created the table). A table
            # that does not exist still fails the step.
            state = rt.catalog.describe(name)
            if state is None:
                raise
            if not rt.coverage_map(name):
                # Nothing was ever delivered to it, and Iceberg may not show a table with no data
                # commit yet: its rows are none, in the live schema.
                context.log.info(f"{where}: {name} has no delivered rows; loading it empty")
                return state.arrow_schema().empty_table()
            # Other writers' rows: wait until they are visible.
            _require_visible(rt.verify(name, raise_errors=True), where)
        return rt.read_rows(name, where=pushdown.where, columns=pushdown.columns)

    def _latest_runs(
        self, context: dg.InputContext, table: pa.Table, key: dg.AssetKey, name: str, *, where: str
    ) -> pa.Table:
        """Only the run each partition's latest materialisation names (``latest_run.py``): a newer run
        still writing, or not yet past its delete, is not read next to the complete one."""
        partitions = list(context.asset_partition_keys) if context.has_asset_partitions else None
        recorded = latest_tags(context.instance, key, partitions)
        selection = select_latest_runs(table, source_for(key), recorded, partitions)
        if selection.dropped_tags:
            context.log.info(
                f"{where}: read the latest complete run of each partition of {name}; skipped the rows of "
                f"{list(selection.dropped_tags)} (a run not materialised yet, or superseded)"
            )
        if selection.unrecorded:
            context.log.warning(
                f"{where}: no materialisation of partition(s) {list(selection.unrecorded)} of {name} is "
                "recorded in this Dagster instance, so every run's rows of them are read (a run written "
                "outside this instance may be counted next to another)"
            )
        return selection.table

    def _select(
        self, context: dg.InputContext, table: pa.Table, options: AssetOptions, *, where: str
    ) -> pa.Table:
        if context.has_asset_partitions:
            if not options.partition_expr:
                raise dg.Failure(
                    description=f"{where}: the upstream asset is partitioned but has no 'partition_expr' "
                    "metadata naming the column that holds the partition key; add it to the upstream asset"
                )
            if options.partition_expr not in table.column_names:
                raise dg.Failure(
                    description=f"{where}: partition_expr column {options.partition_expr!r} is not in "
                    f"{table.column_names}"
                )
            keys = pa.array(list(context.asset_partition_keys), type=pa.string())
            column = pc.cast(table[options.partition_expr], pa.string())
            table = table.filter(pc.is_in(column, value_set=keys))
        if not self._include_reserved:
            table = table.select([n for n in table.column_names if not is_reserved(n)])
        columns = (context.definition_metadata or {}).get("columns")
        if columns:
            wanted = [str(c) for c in (columns.value if isinstance(columns, dg.MetadataValue) else columns)]
            missing = [c for c in wanted if c not in table.column_names]
            if missing:
                raise dg.Failure(description=f"{where}: columns {missing} are not in {table.column_names}")
            table = table.select(wanted)
        return table


def _require_visible(outcome: ReadbackOutcome, where: str) -> None:
    """Fail the step when Iceberg did not show the upstream's rows before the read-back deadline."""
    if outcome.status is ReadbackStatus.NOT_VISIBLE_YET:
        raise dg.Failure(description=f"{where}: {outcome.message}; raise zerobus.readback.wait_timeout_s")
