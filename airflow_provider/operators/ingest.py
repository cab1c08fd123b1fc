"""``ZerobusIngestOperator``: files, an upstream task's path, or a SQL query -> a Delta table via Zerobus.

The operator streams its source as Arrow record batches with bounded memory and hands them to the
runtime's ``write``, which reconciles the table, pushes pipelined through the stream pool and returns
after the last batch is durable. A write is a run of a logical partition (docs/adr/0007-write-modes.md):
``source=<dag_id>/<task_id>``, partition ``<key>/<map_index>@<run_id>`` where ``key`` is ``replace_key``,
else the DAG run's partition key (Airflow 3.2+ partitioned runs), else its logical date (``ds``); a run
with none of them writes ``<run_id>/<map_index>``, a partition of its own. A retried try of the same task
instance skips the row positions an earlier try already delivered, so retries do not duplicate as long as
the source yields the same rows in the same order (sorted globs; give SQL an ORDER BY). A cleared task
whose input was corrected writes the run's next revision (``...@<run_id>#2``), which replaces the first
where the write mode may replace (a derived table, or ``allow_raw_replace``); primary raw otherwise
refuses the changed input with nothing sent.

Ecosystem: the task's outlets carry an ``AssetAlias`` (``zerobus:<table>``) to which ``execute`` attaches
the table's asset ``databricks://<host>/<catalog>/<schema>/<table>`` once the connection is read, so DAGs
scheduled on that asset run after each successful ingest; the "Databricks table" extra link opens the
table in Catalog Explorer; ``get_openlineage_facets_on_complete`` reports the files or SQL tables read
and the table written, with its schema (``airflow_provider.utils.lineage`` names them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseHook, Context, XComArg
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_provider.operators.base import ZerobusBaseOperator, coverage_keys_from_context, run_began
from airflow_provider.operators.links import ZerobusTableLink
from airflow_provider.utils.lineage import (
    TableIdentity,
    WriteLineage,
    alias_name,
    asset_event_extra,
    file_dataset,
    table_identity,
)
from airflow_provider.utils.observability import redact
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import (
    ConfigError,
    NeedsOperatorError,
    PlanRefusedError,
    RerunRefusedError,
    ResumeMismatchError,
    RunSupersededError,
    WriteBoundaryError,
)
from zerobus_orchestration.schema_text import arrow_schema_of_text
from zerobus_orchestration.write_modes import RUN_SEPARATOR, WriteMode, replaces_runs

if TYPE_CHECKING:
    import pyarrow as pa
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    from zerobus_orchestration.files import Rereadable

# Keys of the runtime's WriteResult that go to XCom: numbers and names only, never config or secrets.
SUMMARY_KEYS = (
    "table",
    "source",
    "partition",
    "rows_written",
    "rows_skipped",
    "bytes_written",
    "payload_bytes",
    "payload_mb_per_s",
    "stamped_mb_per_s",
    "offset_start",
    "offset_end",
    "streams_used",
    "coalesce_ratio_p50",
    "delivery_latency_p50_s",
    "delivery_latency_p99_s",
    "delta_version",
    "duration_s",
    "superseded_sources",
    "run_order_version",
    "source_tag",
    "logical_partition",
    "already_delivered",
    "delivered_by",
)


class ZerobusIngestOperator(ZerobusBaseOperator):
    """Write files or a SQL result into ``table`` through Zerobus; XCom gets a small summary.

    Give exactly one source. Either way the write checks every row against the table (or the table it
    would create) before it sends the first: a bad value anywhere fails the task with nothing sent and
    no table created, naming the file (or the SQL result), the row and the column.

    :param path: a Parquet / Arrow IPC / CSV file, a glob, a URI (``s3://...``) or a list of them;
        templated, so it may also be an upstream task's output (``path=extract()`` or a ``xcom_pull``).
    :param sql: a query (or ``.sql`` file) run through ``sql_conn_id``, any common-sql ``DbApiHook``
        connection; rows are fetched ``fetch_rows`` at a time. Memory stays at one batch only if the
        driver's cursor streams: the default psycopg2 (Postgres) and MySQLdb (MySQL) cursors are
        client-side and load the whole result at ``execute``. Give ``cursor_kwargs`` for a server-side
        cursor: ``{"name": "zerobus_ingest"}`` (psycopg2) or ``{"cursorclass": MySQLdb.cursors.SSCursor}``
        (or the MySQL connection extra ``"cursor": "sscursor"``). The result is spooled to local disk
        as it is fetched (Arrow IPC, LZ4; a 0700 folder under ``spool_dir``, deleted when the task
        ends), so the query runs once and the write reads the spool twice: to check, then to send.

    :param table: target table (``catalog.schema.table``); created and evolved from the Arrow schema.
    :param file_format: ``parquet``, ``arrow`` or ``csv``; inferred from the file suffix when unset.
    :param parameters: bind parameters for ``sql``.
    :param schema: ``pyarrow.Schema`` or ``{column: "arrow type"}``: reconciled before the first row
        is sent when ``reconcile_first``, and pins SQL and file column types (CSV is parsed with them;
        every file is checked against them before anything is sent).
    :param descriptions: column comments ``{column: text}`` managed on the table.
    :param role: ``primary_raw`` or ``derived``; the connection's default when unset.
    :param reconcile_first: plan and apply the table change before pushing (fails the task on a
        refused change without sending anything). It runs before the write's whole-input check, so a
        bad value then leaves the table it created; without it, a refused write creates nothing.
    :param batch_rows: rows per Arrow batch read from files.
    :param csv_null_values: the unquoted CSV fields read as NULL (default pyarrow's list: the empty
        field, ``NULL``, ``null``, ``NA``, ``N/A``, ``NaN``, ...; ``[]``: none). A quoted field is never
        NULL, so ``""`` is an empty string.
    :param fetch_rows: rows per ``fetchmany`` from SQL.
    :param spool_dir: where the SQL result is spooled (default: the system's temporary folder).
    :param cursor_kwargs: keyword arguments for the DB-API ``conn.cursor(...)`` of ``sql`` (not templated:
        they may hold driver classes).
    :param allow_empty: skip the task (instead of failing) when a glob matches no files.
    :param resume: skip rows an earlier try of this task instance already delivered.
    :param write_mode: what another run of the same partition (``replace_key`` and map index) does
        (docs/adr/0007-write-modes.md): ``auto`` (the default) sends nothing when the input is what the
        table holds (XCom ``already_delivered``), replaces a derived table's partition, and refuses other
        content on primary raw before anything is sent; ``replace`` replaces the partition's older runs
        once this run's rows are visible; ``append`` keeps every run's rows.
    :param replace_key: the logical partition this run writes; default the DAG run's partition key, else
        its logical date (``ds``).
    :param allow_raw_replace: let a re-run with other content replace a primary-raw partition.
    :param sql_hook_params: keyword arguments for the ``sql_conn_id`` hook's constructor, like
        common-sql's ``hook_params`` (e.g. ``{"schema": "sales"}``); ``hook_params`` goes to the
        ``ZerobusHook``.
    :param table_asset: add the ``AssetAlias`` ``zerobus:<table>`` to ``outlets`` and attach the table's
        asset (``databricks://<host>/<catalog>/<schema>/<table>``, host ``localhost`` embedded) to it on
        success, so DAGs scheduled on that asset run after the ingest. ``outlets`` given here are kept.
    """

    template_fields: Sequence[str] = (
        "table",
        "path",
        "file_format",
        "sql",
        "sql_conn_id",
        "parameters",
        "schema",
        "descriptions",
        "role",
        "zerobus_conn_id",
        "config_overrides",
        "hook_params",
        "sql_hook_params",
        "write_mode",
        "replace_key",
    )
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers = {
        "sql": "sql",
        "parameters": "json",
        "descriptions": "json",
        "hook_params": "json",
        "sql_hook_params": "json",
    }
    ui_color = "#e8f4fd"
    operator_extra_links = (ZerobusTableLink(),)

    def __init__(
        self,
        *,
        table: str,
        path: str | Sequence[str] | XComArg | None = None,
        file_format: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        parameters: Sequence[Any] | Mapping[str, Any] | None = None,
        schema: pa.Schema | Mapping[str, str] | None = None,
        descriptions: Mapping[str, str] | None = None,
        role: str | None = None,
        reconcile_first: bool = False,
        batch_rows: int = 65_536,
        fetch_rows: int = 10_000,
        cursor_kwargs: Mapping[str, Any] | None = None,
        allow_empty: bool = False,
        resume: bool = True,
        sql_hook_params: Mapping[str, Any] | None = None,
        table_asset: bool = True,
        write_mode: str = "auto",
        replace_key: str | None = None,
        csv_null_values: Sequence[str] | None = None,
        spool_dir: str | None = None,
        allow_raw_replace: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (path is None) == (sql is None):
            raise ValueError(
                f"{self.task_id}: give exactly one source, path=... or sql=... (with sql_conn_id)"
            )
        if sql is not None and not sql_conn_id:
            raise ValueError(
                f"{self.task_id}: sql=... needs sql_conn_id, a common-sql (DbApiHook) connection"
            )
        self.table = table
        self.path = path
        self.file_format = file_format
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.parameters = parameters
        self.schema = schema
        self.descriptions = descriptions
        self.role = role
        self.reconcile_first = reconcile_first
        self.batch_rows = batch_rows
        self.fetch_rows = fetch_rows
        self.cursor_kwargs = dict(cursor_kwargs or {})
        self.allow_empty = allow_empty
        self.resume = resume
        self.sql_hook_params = dict(sql_hook_params or {})
        self.table_asset = table_asset
        self.write_mode = write_mode
        self.replace_key = replace_key
        self.csv_null_values = None if csv_null_values is None else list(csv_null_values)
        self.spool_dir = spool_dir
        self.allow_raw_replace = allow_raw_replace
        # The workspace host is in the connection, read only in execute: the alias is declared now
        # (outlets must be known when the DAG is parsed) and resolved to the table's asset then. Named
        # from the unrendered table, so a templated table keeps one alias across runs.
        self.table_alias = alias_name(table)
        if table_asset:
            self.outlets = [*self.outlets, AssetAlias(name=self.table_alias)]
        # Set by execute, read by the extra link (finalize) and the OpenLineage listener in this process.
        self.table_url: str | None = None
        self.lineage = WriteLineage()
        self.partition_key: str | None = None  # the logical partition's key (no map index), set by execute

    # --- sources ------------------------------------------------------------------------------------

    def _sql_hook(self) -> DbApiHook:
        from airflow.providers.common.sql.hooks.sql import DbApiHook

        assert self.sql_conn_id is not None
        hook = BaseHook.get_connection(self.sql_conn_id).get_hook(  # type: ignore[no-untyped-call]
            hook_params=self.sql_hook_params
        )
        if not isinstance(hook, DbApiHook):
            raise AirflowFailException(
                f"{self.task_id}: connection {self.sql_conn_id!r} gives {type(hook).__name__}, not a "
                "common-sql DbApiHook; use a SQL database connection (sqlite, postgres, databricks_sql, ...)"
            )
        return hook

    def _input(self, target_schema: pa.Schema | None) -> Rereadable:
        """The files, or the SQL result spooled to local disk as it is fetched (``zerobus_orchestration.
        spool``: the query runs once): read twice by the write, to check every row before the first is
        sent, then to send."""
        # pyarrow-backed readers are imported here, at execute time: DAG files import this module on
        # every parse, and pyarrow alone costs the DAG processor ~0.4 s per file.
        from airflow_provider.utils.sql import iter_sql_located
        from zerobus_orchestration.files import FileInput, resolve_files
        from zerobus_orchestration.spool import spool

        if self.sql is not None:
            fetched = iter_sql_located(
                self._sql_hook(),
                self.sql,
                parameters=self.parameters,
                fetch_rows=self.fetch_rows,
                schema=target_schema,
                cursor_kwargs=self.cursor_kwargs,
                table=self.table,
            )
            spooled = spool(fetched, declared=target_schema, directory=self.spool_dir)
            self.log.info("spooled %d row(s) of the SQL result to %s", spooled.rows, spooled.folder)
            return spooled
        if not isinstance(self.path, str | list | tuple):
            raise AirflowFailException(
                f"{self.task_id}: path rendered to {type(self.path).__name__}; give a path, a glob or a list"
            )
        files = resolve_files(self.path, self.file_format)
        if not files.paths:
            message = f"{self.task_id}: no input file matches {self.path!r}"
            if self.allow_empty:
                raise AirflowSkipException(message)
            raise AirflowFailException(f"{message}; check the path or set allow_empty=True")
        self.log.info("ingesting %d %s file(s) into %s", len(files.paths), files.format.value, self.table)
        self.lineage.inputs = [file_dataset(path) for path in files.paths]
        return FileInput(
            files, batch_rows=self.batch_rows, schema=target_schema, csv_null_values=self.csv_null_values
        )

    def _reconcile_first(self, data: Rereadable, schema: pa.Schema | None) -> None:
        """Apply the table change before anything is pushed, from ``schema`` or the input's own."""
        schema = schema or data.empty_schema()
        if schema is None:  # a SQL result without a declared schema: its first batch's
            first = next(data.batches(), None)
            if first is None:
                return
            schema = first.schema
        outcome = self.hook.reconcile(self.table, schema, role=self._role(), descriptions=self.descriptions)
        self.log.info(
            "reconciled %s: applied=%s version %s -> %s",
            self.table,
            outcome.applied,
            outcome.version_before,
            outcome.version_after,
        )

    def _role(self) -> Role | None:
        if self.role is None or self.role == "":
            return None
        try:
            return Role(str(self.role))
        except ValueError:
            raise AirflowFailException(
                f"{self.task_id}: role {self.role!r} is not one of {[r.value for r in Role]}"
            ) from None

    # --- execute ------------------------------------------------------------------------------------

    def _run_partition(self, context: Context, partition: str, mode: WriteMode) -> str:
        """``<key>/<map index>@<run id>``: a run of the logical partition ``key`` (``replace_key``, else the
        DAG run's partition key, else the logical date); ``<run id>/<map index>`` in ``append`` or with no
        key at all, where a replace fails naming the fix."""
        if mode is WriteMode.APPEND:
            return partition
        key = self.replace_key or context.get("partition_key") or context.get("ds")
        if not key:
            if mode is WriteMode.AUTO:
                return partition  # no partition to re-run: this run's rows are a partition of their own
            raise AirflowFailException(
                f"{self.task_id}: write_mode='replace' replaces the partition of the run's logical date, and "
                "this run has none; pass replace_key=... (templated, e.g. '{{ params.day }}')"
            )
        run_id, _, map_index = partition.rpartition("/")
        self.partition_key = str(key)
        return f"{key}/{map_index}{RUN_SEPARATOR}{run_id}"

    def execute(self, context: Context) -> dict[str, Any]:
        source, partition = coverage_keys_from_context(context, self)
        try:
            mode = WriteMode.parse(self.write_mode or WriteMode.AUTO, where=f"task {self.task_id}")
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from exc
        partition = self._run_partition(context, partition, mode)
        summary: dict[str, Any] | None = None
        self.lineage = WriteLineage(descriptions=dict(self.descriptions or {}))
        data: Rereadable | None = None
        try:
            identity = table_identity(self.hook.get_config(), self.table)
            self.lineage.output, self.table_url = identity, identity.explorer_url
            target_schema = (
                arrow_schema_of_text(self.schema, table=self.table) if self.schema is not None else None
            )
            self.lineage.schema = target_schema
            data = self._input(target_schema)
            if self.reconcile_first:
                self._reconcile_first(data, target_schema)
            result = self.hook.write(
                self.table,
                data,  # checked whole by the write before its first row is sent
                source=source,
                partition=partition,
                descriptions=self.descriptions,
                role=self._role(),
                resume=self.resume,
                mode=mode,
                schema=target_schema,  # the declared schema creates the table even from an empty source
                not_before=run_began(context),
                allow_raw_replace=self.allow_raw_replace,
            )
            raw = result.as_dict()
            # ``partition`` and ``source_tag``: the run whose rows hold this input (this run's, its next
            # revision's, or an earlier run's when already delivered): what read-back verifies and what a
            # downstream task filters on to read only the latest complete run (write_modes.latest_run_filter).
            summary = {key: raw[key] for key in SUMMARY_KEYS if key in raw}
            role = self._role() or self.hook.get_config().role
            replaced = replaces_runs(mode, role, allow_raw_replace=self.allow_raw_replace)
            summary["write_mode"] = (
                WriteMode.REPLACE.value if replaced and RUN_SEPARATOR in partition else mode.value
            )
            if summary["write_mode"] == WriteMode.REPLACE.value:
                summary["replace_key"] = result.logical_partition
            if self.partition_key is not None and RUN_SEPARATOR in partition:
                summary["partition_key"] = self.partition_key
            self.lineage.schema = target_schema or data.empty_schema()
            self.lineage.rows_written, self.lineage.bytes_written = result.rows_written, result.bytes_written
            self._emit_table_asset(context, identity, summary)
            self.log.info(
                "%s: %s rows written, %s skipped (already delivered by an earlier try), Delta version %s",
                self.table,
                summary.get("rows_written"),
                summary.get("rows_skipped"),
                summary.get("delta_version"),
            )
        except RunSupersededError as exc:
            # A newer run of this partition holds it (the table's order): a retry cannot change that.
            _push_superseded(context, exc, source, partition)
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        except (
            PlanRefusedError,
            WriteBoundaryError,
            ConfigError,
            ResumeMismatchError,
            NeedsOperatorError,
            RerunRefusedError,
        ) as exc:
            # Bad input, a refused table change, an input that changed since an earlier try (resume
            # would lose rows), refused credentials or a refused table: a retry fails the same way.
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        finally:
            if data is not None and self.sql is not None:
                from zerobus_orchestration.spool import Spool

                if isinstance(data, Spool):
                    data.close()  # the spooled result: nothing left on the worker's disk
            self.report_and_release(summary, tables=[str(summary["table"]) if summary else self.table])
        return redact(summary)  # type: ignore[no-any-return]

    def _emit_table_asset(self, context: Context, identity: TableIdentity, summary: dict[str, Any]) -> None:
        """Attach the table's asset to this task's alias; Airflow records the event if the try succeeds.

        The event's ``extra`` names the run and its logical partition. Events through an alias carry only
        the DAG run's partition key (Airflow 3.3 fans alias events out without per-event keys), so when
        the task's outlets name the table's asset itself, its event also gets the partition as a partition
        key (``add_partitions``): consumers scheduled on partitioned assets see which partition arrived.
        """
        events = context.get("outlet_events")
        if events is None:  # executed outside a task runner (no outlets to record)
            return
        extra = asset_event_extra(identity, summary)
        if self.table_asset:
            alias = AssetAlias(name=self.table_alias)
            events[alias].add(Asset(identity.asset_uri), extra=extra)
            self.log.info("asset event for %s (via alias %s)", identity.asset_uri, alias.name)
        key = summary.get("partition_key")
        for outlet in self.outlets:
            if isinstance(outlet, Asset) and outlet.uri == identity.asset_uri:
                accessor = events[outlet]
                accessor.extra.update(extra)
                if isinstance(key, str) and key.strip():
                    accessor.add_partitions(key)
                self.log.info("asset event for %s, partition %r", identity.asset_uri, key)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: input files (or the SQL's tables, when the database names them), the output
        table in the ``databricks://<host>`` namespace with a schema facet and output statistics.

        Needs ``apache-airflow-providers-openlineage`` (whose listener is the only caller)."""
        from airflow_provider.utils.openlineage import operator_lineage, sql_input_datasets

        sql_inputs = None
        if self.sql is not None and self.sql_conn_id:
            sql_inputs = sql_input_datasets(self._sql_hook, str(self.sql), self.lineage)
        return operator_lineage(self.lineage, sql_inputs)


SUPERSEDED_XCOM = "zerobus_superseded"
"""XCom key a superseded replace pushes before failing: its run and the newer run that won."""


def _push_superseded(context: Context, exc: RunSupersededError, source: str, partition: str) -> None:
    ti = context.get("ti")
    if ti is None or not hasattr(ti, "xcom_push"):  # executed outside a task runner
        return
    ti.xcom_push(
        key=SUPERSEDED_XCOM,
        value={
            "table": exc.table,
            "source": source,
            "partition": partition,
            "source_tag": exc.run,
            "superseded_by": exc.winner,
            "superseded_sources": list(exc.superseded),
        },
    )
