"""What ``zerobus-orch plan`` and ``zerobus-orch check`` do, as plain functions returning values.

``cli/main.py`` only parses options and prints; these return ``CommandResult(summary, human, exit_code)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from zerobus_orchestration.catalog.base import DesiredTable, TableCatalog, TableTags
from zerobus_orchestration.catalog.factory import catalog_from_config
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.errors import ConfigError, PlanRefusedError, PreconditionsUnmetError


@dataclass(frozen=True)
class CommandResult:
    summary: dict[str, Any]
    human: str
    exit_code: int


def read_schema(path: Path) -> pa.Schema:
    """The Arrow schema of a Parquet file or an Arrow IPC file/stream."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    if not path.is_file():
        raise ConfigError(f"--schema-from {path}: no such file")
    readers: tuple[Callable[[], pa.Schema], ...] = (
        lambda: pq.read_schema(path),
        lambda: ipc.open_file(path).schema,
        lambda: ipc.open_stream(path.read_bytes()).schema,
    )
    for reader in readers:
        try:
            schema: pa.Schema = reader()
            return schema
        except (pa.ArrowInvalid, OSError):
            continue
    raise ConfigError(f"--schema-from {path}: not a Parquet file or an Arrow IPC file/stream")


def run_plan(
    cfg: ZerobusConfig,
    table: str,
    schema_from: Path,
    *,
    contract: Path | None = None,
    contract_object: str | None = None,
    role: Role | None = None,
    apply: bool = False,
    repair: bool = False,
) -> CommandResult:
    """``repair``: the operator's explicit request to set the primary-raw properties on an existing table
    (reconcile never sets a drifted one back on its own; without it an unmet condition exits 1)."""
    from zerobus_orchestration.contracts import descriptions_from_contract

    catalog = catalog_from_config(cfg)
    schema = read_schema(schema_from)
    descriptions: dict[str, str] = {}
    tags = None
    if contract is not None:
        found = descriptions_from_contract(contract, contract_object)
        descriptions = {k: v for k, v in found.descriptions.items() if k in schema.names}
        tags = TableTags(found.owner, found.contract_uri, found.contract_version)
    desired = DesiredTable.build(
        table,
        schema,
        role or cfg.role,
        descriptions=descriptions,
        tags=tags,
        allow_widening=cfg.catalog.allow_widening,
        comment_policy=cfg.catalog.comment_policy,
        repair=repair,
    )
    the_plan = _plan_of(catalog, table, desired)
    summary: dict[str, Any] = {"table": table, "plan": the_plan.to_dict(), "applied": False}
    if the_plan.refusals:
        return CommandResult(summary, str(the_plan), 1)
    drift = None if repair else _unmet_on_live(catalog, table, desired.role)
    if drift is not None:
        summary.update(unmet=list(drift.unmet), error=str(drift))
        return CommandResult(summary, f"{the_plan}\n{drift}", 1)
    if not apply:
        return CommandResult(summary, str(the_plan), 0)
    try:
        outcome = catalog.reconcile(table, desired)
    except PlanRefusedError as exc:
        summary["error"] = str(exc)
        return CommandResult(summary, str(exc), 1)
    summary.update(applied=outcome.applied, version=outcome.version_after, plan=outcome.plan.to_dict())
    human = str(outcome.plan) + ("\napplied" if outcome.applied else "")
    left = _unmet_on_live(catalog, table, desired.role) if repair else None
    if left is not None:  # e.g. deletion vectors already written: properties alone cannot purge them
        summary.update(unmet=list(left.unmet), error=str(left))
        return CommandResult(summary, f"{human}\n{left}", 1)
    return CommandResult(summary, human, 0)


def _unmet_on_live(catalog: TableCatalog, table: str, role: Role) -> PreconditionsUnmetError | None:
    """The refusal a write would meet on the existing primary-raw ``table`` (``None``: none, or absent)."""
    from zerobus_orchestration.catalog.preconditions import primary_raw_conditions, require_conditions

    live = catalog.describe(table) if role is Role.PRIMARY_RAW else None
    if live is None:
        return None  # absent: the plan creates it with the properties
    try:
        require_conditions(table, primary_raw_conditions(live, table))
    except PreconditionsUnmetError as exc:
        return exc
    return None


def _plan_of(catalog: TableCatalog, table: str, desired: DesiredTable) -> Any:
    # A backend may add role properties before planning (``LocalCatalog.plan``); else plan the raw diff.
    planner = getattr(catalog, "plan", None)
    if callable(planner):
        return planner(table, desired)
    from zerobus_orchestration.catalog.plan import plan

    return plan(catalog.describe(table), desired, allow_widening=desired.allow_widening)


def run_check(cfg: ZerobusConfig, table: str) -> CommandResult:
    from zerobus_orchestration.catalog.preconditions import check_primary_raw, unmet

    conditions = check_primary_raw(catalog_from_config(cfg), table)
    missing = unmet(conditions)
    summary = {
        "table": table,
        "eligible": not missing,
        "conditions": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in conditions],
        "unmet": [c.name for c in missing],
    }
    head = f"{table}: eligible as primary_raw" if not missing else f"{table}: NOT eligible as primary_raw"
    human = head + "".join(f"\n  {c}" for c in conditions)
    return CommandResult(summary, human, 1 if missing else 0)
