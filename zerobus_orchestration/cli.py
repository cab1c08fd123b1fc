"""``zerobus-orch``: demo, serve, ingest, plan, check, readback.

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

from zerobus_orchestration.config import ZerobusConfig, load_config
from zerobus_orchestration.errors import ZerobusOrchestrationError

app = typer.Typer(
    name="zerobus-orch",
    help="Write Arrow data into Databricks Delta tables through Zerobus (or the local emulator).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Write Arrow data into Databricks Delta tables through Zerobus (or the local emulator)."""


WarehouseOpt = Annotated[
    str | None,
    typer.Option("--warehouse", help="Warehouse folder or s3:// URI (default $ZEROBUS_WAREHOUSE)."),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML file with a [zerobus] table.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout, nothing else.")]


def resolve_config(config: Path | None, warehouse: str | None, **overrides: Any) -> ZerobusConfig:
    try:
        return load_config(config, warehouse=warehouse, **overrides)
    except ZerobusOrchestrationError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


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
    from zerobus_orchestration.demo import render_summary, run_demo

    cfg = resolve_config(config, warehouse)
    summary = run_demo(cfg, rows=rows, progress=not as_json and sys.stderr.isatty())
    emit(summary, as_json, render_summary(summary))
    if not summary.get("verified", False):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
