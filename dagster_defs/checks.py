"""Preflight: a contract asset per table, and blocking primary-raw checks that gate the write.

``build_contract_asset(key, schema=...)`` returns a ``ZerobusContract`` holding

- the asset ``<table>__contract`` (``raw/orders`` -> ``raw/orders__contract``) whose materialisation is
  the catalog reconciliation (create / evolve the table, stamp column comments); the plan goes into its
  metadata as JSON and markdown;
- for ``primary_raw`` tables, one blocking check per primary-raw condition (``catalog/preconditions.py``:
  registered, iceberg_reads, column_mapping, protocol, deletion_vectors_disabled), evaluated from the
  runtime's ``preconditions(table)``, which re-reads the table every time. A failed check names what is
  unmet and stops every asset that ``deps=[contract.key]`` — that is, the write.

Blocking checks gate only downstream steps (docs/architecture.md#dagster), so the contract and its checks
must be in the run's selection: ``build_zerobus_definitions`` puts them in its job; with
``dg.materialize`` pass ``[*contract.definitions, data_asset]``.

No ``from __future__ import annotations``: Dagster validates the ``context`` annotations at runtime.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from dagster_defs.contract_definition import TABLE_KINDS, definition_metadata, with_table_kinds
from dagster_defs.metadata import COLUMN_SCHEMA, descriptions_from_column_schema
from dagster_defs.naming import AssetOptions, contract_key_for, table_ref
from dagster_defs.resource import ZerobusResource
from dagster_defs.schemas import arrow_schema_from_column_schema, arrow_schema_from_contract
from zerobus_orchestration.catalog.base import TableState, TableTags
from zerobus_orchestration.catalog.preconditions import (
    COLUMN_MAPPING,
    DELETION_VECTORS_DISABLED,
    ICEBERG_READS,
    PROTOCOL,
    REGISTERED,
    Condition,
)
from zerobus_orchestration.config import Role
from zerobus_orchestration.contracts import descriptions_from_contract, parse_comment
from zerobus_orchestration.errors import ConfigError, PlanRefusedError

# The primary-raw conditions, with what each check guards; names are the core's stable names.
PRIMARY_RAW_CHECKS: Mapping[str, str] = {
    REGISTERED: "The catalog knows the table (Unity Catalog registration / local registry row).",
    ICEBERG_READS: "UniForm Iceberg reads are enabled (IcebergCompatV2 + universalFormat=iceberg).",
    COLUMN_MAPPING: "Column mapping is on (name or id), so Iceberg reads columns by id.",
    PROTOCOL: "Reader/writer protocol versions meet the minimum of the features in use.",
    DELETION_VECTORS_DISABLED: "Deletion vectors are off: Iceberg V2 readers cannot apply them.",
}


@dataclass(frozen=True)
class ZerobusContract:
    """What ``build_contract_asset`` made for one table."""

    data_key: dg.AssetKey
    key: dg.AssetKey
    table: str
    role: Role
    asset: dg.AssetsDefinition
    checks: dg.AssetChecksDefinition | None
    check_keys: tuple[dg.AssetCheckKey, ...] = field(default=())
    data_metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kinds(self) -> set[str]:
        """``{"databricks", "delta"}``: the kinds the catalog UI shows for the table's assets."""
        return set(TABLE_KINDS)

    def attach(self, data_asset: dg.AssetsDefinition) -> dg.AssetsDefinition:
        """``data_asset`` declaring this contract (``data_metadata``, kinds), for the catalog UI and for
        runs without the contract asset; ``build_zerobus_definitions`` applies it to ``tables=``."""

        def _declare(spec: dg.AssetSpec) -> dg.AssetSpec:
            if spec.key != self.data_key:
                return spec
            declared = spec.replace_attributes(metadata={**spec.metadata, **self.data_metadata})
            return declared.replace_attributes(kinds=with_table_kinds(set(spec.kinds)))

        return data_asset.map_asset_specs(_declare)

    @property
    def definitions(self) -> list[dg.AssetsDefinition | dg.AssetChecksDefinition]:
        """The contract asset and its checks, ready for ``dg.materialize`` or ``dg.Definitions``."""
        return [self.asset] if self.checks is None else [self.asset, self.checks]

    @property
    def selection(self) -> dg.AssetSelection:
        """The contract plus its checks (blocking checks gate only when selected)."""
        return dg.AssetSelection.assets(self.key) | dg.AssetSelection.checks_for_assets(self.key)


@dataclass(frozen=True)
class _ContractSpec:
    """Everything the contract asset needs at execution time, as plain values."""

    table: str
    schema: pa.Schema
    role: Role
    descriptions: Mapping[str, str]
    tags: TableTags | None


def _resolve_schema(
    *,
    table: str,
    schema: pa.Schema | None,
    column_schema: dg.TableSchema | None,
    contract_path: str | Path | None,
    contract_object: str | None,
) -> pa.Schema:
    given = [s for s in (schema, column_schema, contract_path) if s is not None]
    if len(given) != 1:
        raise ConfigError(
            f"table {table}: pass exactly one of schema=, column_schema= or contract_path= "
            "to build_contract_asset"
        )
    if schema is not None:
        return schema
    if column_schema is not None:
        return arrow_schema_from_column_schema(column_schema, table=table)
    assert contract_path is not None
    return arrow_schema_from_contract(contract_path, table=table, schema_object=contract_object)


def _descriptions_and_tags(
    *,
    schema: pa.Schema,
    column_schema: dg.TableSchema | None,
    contract_path: str | Path | None,
    contract_object: str | None,
    descriptions: Mapping[str, str] | None,
    owner: str | None,
) -> tuple[dict[str, str], TableTags | None]:
    described: dict[str, str] = {}
    tags: TableTags | None = None
    if column_schema is not None:
        described.update(descriptions_from_column_schema(column_schema))
    if contract_path is not None:
        found = descriptions_from_contract(contract_path, contract_object)
        described.update(found.descriptions)
        tags = TableTags(
            owner=owner or found.owner,
            contract_uri=found.contract_uri,
            contract_version=found.contract_version,
        )
    described.update(descriptions or {})
    if tags is None and owner is not None:
        tags = TableTags(owner=owner)
    names = set(schema.names)
    return {k: v for k, v in described.items() if k in names}, tags


def _live_column_schema(state: TableState) -> dg.TableSchema:
    columns = [
        dg.TableColumn(
            name=c.name,
            type=c.delta_type,
            description=parse_comment(c.comment).text if c.comment else None,
            constraints=dg.TableColumnConstraints(nullable=c.nullable),
        )
        for c in state.columns
    ]
    return dg.TableSchema(columns=columns)


def _plan_markdown(plan: Any) -> str:
    lines = [f"**{plan.table}**", ""]
    if plan.empty:
        lines.append("Up to date: nothing to apply.")
    for step in plan.steps:
        lines.append(f"- `{step.kind}`: {step.describe()}")
    for note in plan.notes:
        lines.append(f"- note: {note}")
    return "\n".join(lines)


def _reconcile_metadata(spec: _ContractSpec, outcome: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "dagster/table_name": spec.table,
        "dagster/column_schema": _live_column_schema(outcome.state),
        "zerobus/role": spec.role.value,
        "zerobus/plan": dg.MetadataValue.json(outcome.plan.to_dict()),
        "zerobus/plan_markdown": dg.MetadataValue.md(_plan_markdown(outcome.plan)),
        "zerobus/applied": bool(outcome.applied),
        "zerobus/steps": len(outcome.plan.steps),
    }
    if outcome.version_before is not None:
        metadata["zerobus/delta_version_before"] = int(outcome.version_before)
    if outcome.version_after is not None:
        metadata["zerobus/delta_version"] = int(outcome.version_after)
    if outcome.notes:
        metadata["zerobus/notes"] = dg.MetadataValue.json(list(outcome.notes))
    return metadata


def _definition_metadata(spec: _ContractSpec, key: dg.AssetKey) -> dict[str, Any]:
    return definition_metadata(
        contract_key=key,
        table=spec.table,
        schema=spec.schema,
        descriptions=spec.descriptions,
        role=spec.role,
        tags=spec.tags,
    )


def _build_asset(
    spec: _ContractSpec,
    *,
    key: dg.AssetKey,
    data_key: dg.AssetKey,
    resource_key: str,
    group_name: str | None,
) -> dg.AssetsDefinition:
    @dg.asset(
        key=key,
        group_name=group_name,
        kinds=set(TABLE_KINDS),
        required_resource_keys={resource_key},
        description=f"Catalog contract of {spec.table} ({spec.role.value}): creates or evolves the table "
        f"before {data_key.to_user_string()} writes to it.",
        metadata=_definition_metadata(spec, key),
    )
    def _contract(context: dg.AssetExecutionContext) -> dg.MaterializeResult:  # type: ignore[type-arg]
        zerobus: ZerobusResource = getattr(context.resources, resource_key)
        try:
            outcome = zerobus.runtime.reconcile(
                spec.table,
                spec.schema,
                role=spec.role,
                descriptions=dict(spec.descriptions) or None,
                tags=spec.tags,
            )
        except PlanRefusedError as exc:
            raise dg.Failure(
                description=str(exc),
                metadata={"table": spec.table, "reasons": dg.MetadataValue.json(list(exc.reasons))},
                allow_retries=False,
            ) from exc
        context.log.info(str(outcome.plan))
        return dg.MaterializeResult(metadata=_reconcile_metadata(spec, outcome))

    return _contract


def _condition_result(check: dg.AssetCheckKey, found: Condition | None, table: str) -> dg.AssetCheckResult:
    if found is None:
        return dg.AssetCheckResult(
            asset_key=check.asset_key,
            check_name=check.name,
            passed=False,
            description=f"{table}: condition {check.name} was not evaluated (does the table exist?)",
            metadata={"table": table},
        )
    return dg.AssetCheckResult(
        asset_key=check.asset_key,
        check_name=check.name,
        passed=found.ok,
        description=f"{table}: {found}",
        metadata={"table": table, "detail": found.detail},
    )


def _build_checks(
    spec: _ContractSpec, *, key: dg.AssetKey, resource_key: str
) -> tuple[dg.AssetChecksDefinition, tuple[dg.AssetCheckKey, ...]]:
    specs = [
        dg.AssetCheckSpec(name, asset=key, blocking=True, description=d)
        for name, d in PRIMARY_RAW_CHECKS.items()
    ]

    @dg.multi_asset_check(
        specs=specs,
        can_subset=True,
        name=f"{key.to_python_identifier()}_primary_raw",
        required_resource_keys={resource_key},
        description=f"Primary-raw preconditions of {spec.table}, re-read from the catalog on every run.",
    )
    def _primary_raw(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        zerobus: ZerobusResource = getattr(context.resources, resource_key)
        conditions = {c.name: c for c in zerobus.runtime.preconditions(spec.table)}
        for check in sorted(context.selected_asset_check_keys, key=lambda k: k.name):
            yield _condition_result(check, conditions.get(check.name), spec.table)

    return _primary_raw, tuple(s.key for s in specs)


def build_contract_asset(
    asset_key: dg.AssetKey | str | Sequence[str] | dg.AssetsDefinition,
    *,
    schema: pa.Schema | None = None,
    column_schema: dg.TableSchema | None = None,
    contract_path: str | Path | None = None,
    contract_object: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    owner: str | None = None,
    role: Role | str = Role.PRIMARY_RAW,
    catalog: str = "main",
    schema_name: str | None = None,
    table: str | None = None,
    resource_key: str = "zerobus",
    group_name: str | None = None,
) -> ZerobusContract:
    """The contract asset ``<table>__contract`` of the data asset ``asset_key``, plus its primary-raw checks.

    The target table name follows the IO manager's rules (``catalog`` + ``schema_name`` or the key prefix
    + the key's last part); ``table`` overrides it (a table name or a full ``catalog.schema.table``).
    Exactly one of ``schema`` (Arrow), ``column_schema`` (``dg.TableSchema``, SQL type text) or
    ``contract_path`` (ODCS YAML) declares the columns. Column descriptions come from the column schema,
    the ODCS contract and ``descriptions`` (later wins) and become managed column comments.

    Given the data asset itself (declare it with ``deps=[contract_key_for(key)]``), its definition
    metadata supplies what is not passed: ``dagster/column_schema`` (columns and descriptions) and the
    IO manager's naming keys (``zerobus/table``, ``schema``), so asset and contract cannot disagree.

    .. code-block:: python

        orders_contract = build_contract_asset(["raw", "orders"], schema=ORDERS_SCHEMA)

        @dg.asset(key=["raw", "orders"], deps=[orders_contract.key])
        def orders() -> pa.Table: ...

        dg.materialize([*orders_contract.definitions, orders], resources=...)
    """
    asset_meta: Mapping[str, Any] = {}
    if isinstance(asset_key, dg.AssetsDefinition):
        data_key = asset_key.key
        asset_meta = asset_key.specs_by_key[data_key].metadata or {}
    else:
        data_key = dg.AssetKey.from_coercible(asset_key)
    declared = asset_meta.get(COLUMN_SCHEMA)
    declared_schema = declared.schema if isinstance(declared, dg.TableSchemaMetadataValue) else declared
    if isinstance(declared_schema, dg.TableSchema):
        if schema is None and column_schema is None and contract_path is None:
            column_schema = declared_schema
        else:
            descriptions = {**descriptions_from_column_schema(declared_schema), **(descriptions or {})}
    resolved_role = Role(role)
    where = f"asset {data_key.to_user_string()}"
    options = AssetOptions.from_metadata(
        {**asset_meta, **({"zerobus/table": table} if table else {})}, where=where
    )
    ref = table_ref(data_key, catalog=catalog, schema=schema_name, options=options)
    arrow_schema = _resolve_schema(
        table=ref.full_name,
        schema=schema,
        column_schema=column_schema,
        contract_path=contract_path,
        contract_object=contract_object,
    )
    described, tags = _descriptions_and_tags(
        schema=arrow_schema,
        column_schema=column_schema,
        contract_path=contract_path,
        contract_object=contract_object,
        descriptions=descriptions,
        owner=owner,
    )
    spec = _ContractSpec(ref.full_name, arrow_schema, resolved_role, described, tags)
    key = contract_key_for(data_key)
    asset = _build_asset(spec, key=key, data_key=data_key, resource_key=resource_key, group_name=group_name)
    checks: dg.AssetChecksDefinition | None = None
    check_keys: tuple[dg.AssetCheckKey, ...] = ()
    if resolved_role is Role.PRIMARY_RAW:
        checks, check_keys = _build_checks(spec, key=key, resource_key=resource_key)
    return ZerobusContract(
        data_key=data_key,
        key=key,
        table=ref.full_name,
        role=resolved_role,
        asset=asset,
        checks=checks,
        check_keys=check_keys,
        data_metadata=_definition_metadata(spec, key),
    )


def build_readback_check(
    asset_key: dg.AssetKey | str | Sequence[str],
    *,
    name: str = "iceberg_readback",
    resource_key: str = "zerobus",
    blocking: bool = False,
) -> dg.AssetChecksDefinition:
    """A check verifying, through Iceberg, the coverage of the asset's latest materialisation.

    Run in a job it blocks until Iceberg catches up (``readback.wait_timeout_s``); the read-back sensor
    built with ``check_name=name`` reports the same check without blocking anything.
    """
    from dagster_defs.metadata import report_metadata
    from dagster_defs.sensors import WriteTarget, nothing_to_verify_verdict
    from zerobus_orchestration.errors import NothingToVerifyError, ReadbackError

    key = dg.AssetKey.from_coercible(asset_key)

    @dg.asset_check(
        asset=key,
        name=name,
        blocking=blocking,
        required_resource_keys={resource_key},
        description="What the latest materialisation delivered is visible and verified through Iceberg.",
    )
    def _readback(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        zerobus: ZerobusResource = getattr(context.resources, resource_key)
        records = context.instance.fetch_materializations(key, limit=1).records
        materialization = records[0].asset_materialization if records else None
        target = WriteTarget.from_metadata(materialization.metadata) if materialization else None
        if materialization is None or target is None:
            return dg.AssetCheckResult(passed=False, description="no Zerobus materialisation to verify yet")
        try:
            outcome = zerobus.runtime.verify(
                target.table, source=target.source, partition=target.partition, raise_errors=True
            )
        except NothingToVerifyError:
            # Same judgement as the read-back sensor: an empty write passes, a write with rows fails.
            passed, why = nothing_to_verify_verdict(target, materialization.metadata)
            return dg.AssetCheckResult(
                passed=passed, description=why, metadata={"readback/nothing_to_verify": True}
            )
        except ReadbackError as exc:
            return dg.AssetCheckResult(passed=False, description=f"{target.table}: {exc}")
        return dg.AssetCheckResult(
            passed=outcome.verified,
            metadata={**report_metadata(outcome.report or {}), "readback/status": outcome.status.value},
            description=f"{target.table}: verified through Iceberg" if outcome.verified else outcome.message,
        )

    return _readback
