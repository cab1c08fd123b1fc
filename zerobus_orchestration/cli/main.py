"""``zerobus-orch``: demo, serve, ingest, plan, check, readback, repair.

Commands parse options and delegate to one module each; heavy imports happen inside the command so
``--help`` stays fast. Every command takes ``--warehouse`` (default ``$ZEROBUS_WAREHOUSE`` or
``./.zerobus/warehouse``) and ``--config`` (a TOML file with a ``[zerobus]`` table).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from zerobus_orchestration.cli.errors import EXIT_BAD_INPUT, OneLineErrorsTyper, run, set_debug
from zerobus_orchestration.cli.errors import report as report_error
from zerobus_orchestration.config import SHARED_EMULATOR_MODE, ZerobusConfig, load_config
from zerobus_orchestration.errors import ConfigError, ZerobusOrchestrationError

# Every command registered on this app ends a failure with one line "error: <cause>" on stderr and exit
# 2 (bad input) or 1 (anything else); see cli_errors. Commands added later are covered the same way.
app = OneLineErrorsTyper(
    name="zerobus-orch",
    help="Write Arrow data into Databricks Delta tables through Zerobus (or the local emulator).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts contain [zerobus], which rich would swallow as markup
)


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Print the traceback of a failure (also: ZEROBUS_DEBUG=1).")
    ] = False,
) -> None:
    """Write Arrow data into Databricks Delta tables through Zerobus (or the local emulator)."""
    set_debug(debug)


WarehouseOpt = Annotated[
    str | None,
    typer.Option("--warehouse", help="Warehouse folder or s3:// URI (default $ZEROBUS_WAREHOUSE)."),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML file with a [zerobus] table.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout, nothing else.")]


def resolve_config(config: Path | None, warehouse: str | None, **overrides: Any) -> ZerobusConfig:
    # The orchestrators' default too: the CLI reuses the warehouse's running emulator (``readback`` right
    # after a Dagster or Airflow run) instead of starting its own, which only one process may do.
    try:
        cfg = load_config(config, warehouse=warehouse, **overrides)
    except ZerobusOrchestrationError as exc:
        raise typer.Exit(report_error(exc, EXIT_BAD_INPUT)) from None
    return cfg.with_default_emulator_mode(SHARED_EMULATOR_MODE)


def emit(summary: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
    else:
        typer.echo(human)


@app.command()
def demo(
    rows: Annotated[int, typer.Option("--rows", help="Rows to stream.")] = 1_000_000,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the main job on the embedded default and print what was written, acknowledged and verified."""
    from zerobus_orchestration.cli.demo import render_summary, run_demo

    cfg = resolve_config(config, warehouse)
    summary = run_demo(cfg, rows=rows, progress=not as_json and sys.stderr.isatty())
    emit(summary, as_json, render_summary(summary))
    if not (summary.get("verified") and summary.get("success", True)):
        raise typer.Exit(1)


@app.command()
def plan(
    table: Annotated[str, typer.Option("--table", help="Target table, catalog.schema.table.")],
    schema_from: Annotated[
        Path, typer.Option("--schema-from", help="Parquet or Arrow IPC file whose schema declares the table.")
    ],
    contract: Annotated[
        Path | None, typer.Option("--contract", help="ODCS data contract YAML with column descriptions.")
    ] = None,
    contract_object: Annotated[
        str | None, typer.Option("--contract-object", help="Schema object in the contract (if several).")
    ] = None,
    role: Annotated[
        str | None, typer.Option("--role", help="primary_raw or derived (default: config).")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Execute the plan (create/evolve the table).")
    ] = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Also set the primary-raw properties on an existing table whose properties drifted "
            "(never done without this flag: a drifted table is refused).",
        ),
    ] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show (or with --apply, execute) the reconcile plan for a table; exit 1 if the plan refuses."""
    from zerobus_orchestration.cli.catalog_commands import run_plan
    from zerobus_orchestration.config import Role

    cfg = resolve_config(config, warehouse)
    try:
        result = run_plan(
            cfg,
            table,
            schema_from,
            contract=contract,
            contract_object=contract_object,
            role=Role(role) if role else None,
            apply=apply,
            repair=repair,
        )
    except (ZerobusOrchestrationError, ValueError) as exc:
        raise typer.Exit(report_error(exc, EXIT_BAD_INPUT)) from None
    emit(result.summary, as_json, result.human)
    raise typer.Exit(result.exit_code)


@app.command()
def check(
    table: Annotated[str, typer.Option("--table", help="Target table, catalog.schema.table.")],
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check primary-raw preconditions; exit 1 listing every unmet one."""
    from zerobus_orchestration.cli.catalog_commands import run_check

    cfg = resolve_config(config, warehouse)
    try:
        result = run_check(cfg, table)
    except ZerobusOrchestrationError as exc:
        raise typer.Exit(report_error(exc, EXIT_BAD_INPUT)) from None
    emit(result.summary, as_json, result.human)
    raise typer.Exit(result.exit_code)


@app.command()
def serve(
    warehouse: WarehouseOpt = None,
    port: Annotated[int | None, typer.Option("--port", help="gRPC port (default: config, 0 = free).")] = None,
    token_port: Annotated[
        int | None, typer.Option("--token-port", help="OAuth + Iceberg REST HTTP port (0 = free).")
    ] = None,
    faults: Annotated[Path | None, typer.Option("--faults", help="JSON list of emulator faults.")] = None,
    no_iceberg: Annotated[bool, typer.Option("--no-iceberg", help="Skip the Iceberg mirror/REST.")] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    insecure_well_known_secret: Annotated[
        bool,
        typer.Option(
            "--insecure-well-known-secret",
            help="Serve with the well-known default client secret instead of the warehouse's own "
            "(any local user can then get a token and write).",
        ),
    ] = False,
) -> None:
    """Run the local Zerobus emulator in the foreground; print endpoint, token URL and Iceberg REST URL.

    Its workspace URL is also a local cloud (OIDC, Unity Catalog, SQL statements) for the production
    configuration; see "Rehearse production locally" in docs/guides/emulator.md. Its client secret is
    zerobus.emulator.client_secret when the config sets one, else the warehouse's own, generated into
    <state>/emulator.secret (owner-only), whose path it prints (client_secret_file with --json).
    """
    from zerobus_orchestration.runtime.embedded import build_credentials, require_emulator

    require_emulator()  # names the extra to install, instead of failing on a missing grpc
    from zerobus_orchestration.emulator.faults import load_faults
    from zerobus_orchestration.emulator.serve import run
    from zerobus_orchestration.locations import absolute_state_dir, absolute_warehouse
    from zerobus_orchestration.storage import config_storage_options

    ports = {k: v for k, v in {"port": port, "token_port": token_port}.items() if v is not None}
    cfg = resolve_config(config, warehouse, emulator=ports or None)
    armed = [*(load_faults(config) if config else []), *(load_faults(faults) if faults else [])]
    run(
        absolute_warehouse(cfg.warehouse),  # the storage locations it reports must open from anywhere
        cfg.emulator,
        armed,
        as_json=as_json,
        iceberg=not no_iceberg,
        storage_options=config_storage_options(cfg) or None,
        state_dir=absolute_state_dir(cfg.state_path),
        credentials=build_credentials(cfg),
        catalogs=cfg.catalog.local_catalogs,
        insecure_well_known_secret=insecure_well_known_secret,
    )


@app.command()
def ingest(
    table: Annotated[str, typer.Option("--table", help="Target table, catalog.schema.table.")],
    files: Annotated[list[str], typer.Argument(help="Parquet, Arrow IPC or CSV files or globs to write.")],
    source: Annotated[
        str | None,
        typer.Option("--source", help="Source id for _twg_source and coverage (default: the arguments)."),
    ] = None,
    partition: Annotated[
        str,
        typer.Option(
            "--partition",
            help="The logical partition this write is a run of (KEY, written as KEY@RUN with RUN new for "
            "each command), or KEY@RUN to name the run so the same command resumes it.",
        ),
    ] = "",
    no_resume: Annotated[
        bool, typer.Option("--no-resume", help="Send every row even if coverage holds it already.")
    ] = False,
    schema: Annotated[
        list[str] | None,
        typer.Option(
            "--schema",
            help="Declare a column's type instead of inferring it, COLUMN=TYPE (e.g. 'ts=TIMESTAMP', "
            "'price=DECIMAL(38,2) NOT NULL'); repeatable.",
        ),
    ] = None,
    csv_null: Annotated[
        list[str] | None,
        typer.Option(
            "--csv-null",
            help="CSV: an unquoted field equal to this is NULL (repeatable; replaces the default list, "
            "pyarrow's: '', NULL, null, NA, N/A, NaN, ...). A quoted field is never NULL.",
        ),
    ] = None,
    no_csv_nulls: Annotated[
        bool, typer.Option("--no-csv-nulls", help="CSV: no field is NULL, every string column is text.")
    ] = False,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="What a re-run of a --partition does (see docs/guides/write-modes.md). auto (default): "
            "the same content sends nothing; other content replaces a derived table's partition and is "
            "refused on primary raw. replace: once this run's rows are visible, delete the partition's "
            "older runs. append: keep every run's rows.",
        ),
    ] = "auto",
    replace_key: Annotated[
        str | None,
        typer.Option(
            "--replace-key",
            help="With --mode auto or replace: the logical partition (default: --partition). The write runs "
            "as partition KEY@RUN, RUN new for each command unless --partition names it.",
        ),
    ] = None,
    allow_raw_replace: Annotated[
        bool,
        typer.Option(
            "--allow-raw-replace",
            help="Let a re-run replace a primary_raw partition's rows (refused without it).",
        ),
    ] = False,
    role: Annotated[
        str | None, typer.Option("--role", help="primary_raw or derived (default: config).")
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write files into a table as one write; return once every row is durable.

    Every row of every file is checked against the table (or the table the write would create) before
    the first is sent: a bad value anywhere fails the command with nothing sent and no table created,
    naming the file, the row and the column. Row positions count across all files in sorted path
    order, so re-running the same command resumes after what was already delivered and sends only the
    rest. With ``--mode replace`` the earlier runs of
    the partition are deleted once this run's rows are visible; pass ``--partition KEY@RUN`` to make a
    replace resumable (re-running it resumes, then deletes). A replace that a newer run of the partition
    superseded exits 1 naming it.
    """
    from zerobus_orchestration.cli.write_mode import superseded_summary, write_partition
    from zerobus_orchestration.config import Role
    from zerobus_orchestration.errors import ConfigError, RunSupersededError
    from zerobus_orchestration.files import declared_columns, read_files
    from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
    from zerobus_orchestration.write_modes import WriteMode, logical_partition, rerun_policy

    cfg = resolve_config(config, warehouse)
    write_source = source or ",".join(Path(f).name for f in files)
    write_mode = WriteMode.parse(mode, where=f"ingest into {table}")
    table_role = Role(role) if role else cfg.role
    try:  # a replace of primary raw without the opt-in: refused before any file is read or emulator started
        rerun_policy(write_mode, table_role, table=table, named=True, allow_raw_replace=allow_raw_replace)
    except ConfigError as exc:  # the runtime's words, plus how to say "derived" on the command line
        raise ConfigError(f"{exc}; on the command line: --role derived (or ZEROBUS_ROLE=derived)") from None
    partition = write_partition(write_mode, partition, replace_key, table=table, source=source)
    try:
        nulls = () if no_csv_nulls else csv_null
        inputs = read_files(files, schema=declared_columns(schema), csv_null_values=nulls)
        runtime = acquire_runtime(cfg)
        result = runtime.write(
            table,
            inputs,  # checked whole before the first row is sent; an input without a row creates the table
            source=write_source,
            partition=partition,
            role=table_role,
            resume=not no_resume,
            mode=write_mode,
            replace_key=replace_key,
            allow_raw_replace=allow_raw_replace,
        ).as_dict()
    except RunSupersededError as exc:  # a newer run of the partition won: say which, then fail (exit 1)
        if as_json:
            emit(superseded_summary(exc, source=write_source, partition=partition), True, "")
        raise
    finally:
        close_all_runtimes()
    human = (
        f"{write_source}: {result['rows_written']:,} rows from {len(inputs.paths)} file(s) durable in "
        f"{result['table']} (skipped {result['rows_skipped']:,} already delivered; "
        f"Delta version {result['delta_version']})"
    )
    if result["already_delivered"]:
        human += (
            f"\nalready delivered: nothing sent, the table holds this input as run {result['delivered_by']}"
        )
    elif write_mode is WriteMode.REPLACE or result["superseded_sources"]:
        superseded = result["superseded_sources"]
        human += (
            f"\nreplaced partition {logical_partition(partition)!r} (this run: {result['partition']!r}): "
            f"deleted the rows of {len(superseded)} earlier run(s)"
            + (f": {', '.join(superseded)}" if superseded else "")
        )
    emit({**result, "files": list(inputs.paths)}, as_json, human)


@app.command()
def readback(
    table: Annotated[str, typer.Option("--table", help="Target table, catalog.schema.table.")],
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="The source that wrote the rows (Dagster: the asset key, e.g. raw/orders; Airflow: "
            "<dag_id>/<task_id>). Alone: its latest run.",
        ),
    ] = None,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition",
            help="The partition (a Dagster partition key, an Airflow run's '<run_id>/<map_index>'): its "
            "latest run is verified; '<key>@<run id>' names one run.",
        ),
    ] = None,
    wait: Annotated[
        float | None, typer.Option("--wait", help="Seconds to wait for Iceberg metadata (default: config).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Ask the emulator to generate Iceberg metadata now.")
    ] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify through Iceberg that a write's rows are all there, once: --table T --source S [--partition P].

    Exit 1 unless verified (lost, duplicated, not visible yet, ...). Read-only: no write runtime. What
    was delivered comes from this host's coverage cache when it has one, else from the table itself (the
    Delta log's ``_twg_source``/``_twg_offset``, ``--source`` needed): then everything durable in Delta
    must be visible through Iceberg, with no gap. A partition given without its run (Dagster writes
    ``<partition key>@<run id>``) stands for its latest run, found in the table.
    """
    from zerobus_orchestration.runtime.registry import close_all_runtimes, readback_service

    cfg = resolve_config(config, warehouse)
    try:
        outcome = readback_service(cfg).verify(
            table, source=source, partition=partition, wait_s=wait, force=force or None, raise_errors=True
        )
    finally:
        close_all_runtimes()
    summary = {
        **(outcome.report or {"table": table, "verified": False}),
        "status": outcome.status.value,
        "message": outcome.message,
    }
    origin = {
        "write_record": "the write's record",
        "coverage_cache": "this host's coverage cache",
        "table_truth": "the table's Delta log (everything durable must be visible, with no gap)",
    }.get(str(summary.get("expected_from")), "nowhere")
    human = (
        f"{table}: {'verified' if outcome.status.is_successful else 'NOT verified'} "
        f"({outcome.status.value}); {summary.get('rows_scanned', 0):,} rows scanned at Delta version "
        f"{summary.get('iceberg_delta_version')}, {len(summary.get('missing_ranges', []))} missing range(s), "
        f"{summary.get('duplicate_count', 0)} duplicate(s), {summary.get('rows_outside_coverage', 0)} "
        f"row(s) outside what was delivered; expected ranges from {origin}"
    )
    if summary.get("latest_run"):
        human = f"{human}; latest run: {summary['latest_run']!r}"
    if outcome.report is None or not outcome.status.is_successful:
        human = f"{human}\n{outcome.message}"
    emit(summary, as_json, human)
    if not outcome.status.is_successful:
        raise typer.Exit(1)


@app.command()
def repair(
    table: Annotated[str, typer.Option("--table", help="The table, catalog.schema.table.")],
    dedupe: Annotated[
        bool,
        typer.Option(
            "--dedupe",
            help="Delete the extra copies of rows held more than once (same _twg_source and _twg_offset), "
            "keeping one of each, in one commit.",
        ),
    ] = False,
    source: Annotated[str | None, typer.Option("--source", help="Only this source's rows.")] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", help="Only this logical partition of --source (every run).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be removed; change nothing.")
    ] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Repair what at-least-once delivery leaves: with --dedupe, keep one copy of each duplicated row.

    Use it when read-back reports DUPLICATED (see docs/runbook.md). Rows at other positions are not
    touched; the table is read again afterwards to prove no position is held twice.
    """
    from zerobus_orchestration.catalog.factory import catalog_from_config
    from zerobus_orchestration.runtime.dedupe import dedupe as run_dedupe

    if not dedupe:
        raise typer.BadParameter("name the repair to run: --dedupe (the only one so far)")
    cfg = resolve_config(config, warehouse)
    try:
        report = run_dedupe(
            catalog_from_config(cfg), cfg, table, source=source, partition=partition, dry_run=dry_run
        )
    except ZerobusOrchestrationError as exc:
        raise typer.Exit(report_error(exc, EXIT_BAD_INPUT if isinstance(exc, ConfigError) else 1)) from None
    verb = "would remove" if dry_run else "removed"
    lines = [
        f"{report.table}: {verb} {report.duplicate_rows:,} duplicate row(s) in {len(report.extra_rows)} "
        f"source tag(s)"
        + (
            ""
            if dry_run or not report.duplicate_rows
            else f" (Delta version {report.delta_version_before} -> {report.delta_version_after})"
        )
    ]
    lines += [
        f"  {tag}: {rows:,} extra cop(ies) at {len(report.ranges[tag])} range(s)"
        for tag, rows in report.extra_rows.items()
    ]
    emit(report.as_dict(), as_json, "\n".join(lines))


emulator_app = OneLineErrorsTyper(  # failures end with one "error: <cause>" line, as for the others
    name="emulator",
    help="Operate the local emulator's state: failed tables, quarantine.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(emulator_app)


def _emulator_paths(cfg: ZerobusConfig) -> tuple[str, Path]:
    from zerobus_orchestration.locations import absolute_state_dir, absolute_warehouse

    return absolute_warehouse(cfg.warehouse), absolute_state_dir(cfg.state_path) / "wal"


@emulator_app.command("status")
def emulator_status_command(
    warehouse: WarehouseOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """List the tables with a write-ahead log and the failed ones with their cause; exit 1 if any failed."""
    from zerobus_orchestration.emulator.repair import emulator_status

    cfg = resolve_config(config, warehouse)
    status = emulator_status(*_emulator_paths(cfg))
    lines = [f"emulator state {status['wal_dir']} ({'serving' if status['emulator_running'] else 'stopped'})"]
    for entry in status["tables"]:
        failed = entry["failed"]
        lines.append(
            f"  {entry['table']}: {entry['wal_bytes']:,} WAL bytes, "
            + (f"FAILED: {failed.get('message')}" if failed else "ok")
        )
    lines += [f"  {t}: {n} batch(es) in quarantine" for t, n in status["quarantined_batches"].items()]
    emit(status, as_json, "\n".join(lines))
    if status["failed"]:
        raise typer.Exit(1)


@emulator_app.command("quarantine")
def emulator_quarantine_command(
    table: Annotated[str, typer.Option("--table", help="The failed table, catalog.schema.table.")],
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Unblock a failed table (emulator stopped): commit what Delta takes, keep the rest in quarantine."""
    from zerobus_orchestration.emulator.repair import quarantine_table
    from zerobus_orchestration.storage import config_storage_options

    cfg = resolve_config(config, warehouse)
    path, wal_root = _emulator_paths(cfg)
    report = quarantine_table(path, wal_root, table, config_storage_options(cfg) or None)
    moved = report["quarantined"]
    human = (
        f"{report['table']}: quarantined {len(moved)} batch(es) to {report['quarantine_dir']}; "
        f"the table is unblocked (Delta version {report['delta_version']})"
        if moved
        else f"{report['table']}: nothing to quarantine; every acknowledged batch is committed"
    )
    emit(report, as_json, human)


def main() -> None:
    """The installed script: the app, then an exit that skips interpreter finalization (``process_exit``:
    Arrow threads still freeing a table read's buffers would otherwise abort a finished command)."""
    from zerobus_orchestration.cli.process_exit import leave

    try:
        run(app)
    except SystemExit as done:
        leave(done.code)


if __name__ == "__main__":
    main()
