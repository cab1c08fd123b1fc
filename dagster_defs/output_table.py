"""The table an asset output is written to, made ready before any row of it is sent.

A table with a contract is created and evolved from the contract (``contract_definition.py``), never
from the output's inferred schema: a nullable key or a narrower decimal that every later contract run
would refuse. The contract's role and column descriptions win over the asset's. An asset that depends
on a contract this run cannot see must not create its table by inference either. Without a contract
the write evolves the table itself, and the columns it adds are reported (``drift.py``).
"""

from collections.abc import Mapping

import dagster as dg
import pyarrow as pa

from dagster_defs.contract_definition import ContractRef
from dagster_defs.drift import added_columns, refuse_undeclared, undeclared_contract
from dagster_defs.metadata import COLUMN_SCHEMA, descriptions_from_column_schema
from zerobus_orchestration.config import Role
from zerobus_orchestration.reserved import is_reserved
from zerobus_orchestration.runtime.facade import ZerobusRuntime


def role_and_descriptions(
    metadata: Mapping[str, object] | None, schema: pa.Schema, contract: ContractRef | None, role: Role | None
) -> tuple[Role | None, dict[str, str]]:
    """The table's role and the descriptions of the output's columns: the asset's (``role``, the
    ``dagster/column_schema`` of its definition ``metadata``), the contract's where both say."""
    described = descriptions_from_column_schema((metadata or {}).get(COLUMN_SCHEMA))
    descriptions = {k: v for k, v in described.items() if k in schema.names and not is_reserved(k)}
    if contract is None:
        return role, descriptions
    described = {**descriptions, **contract.descriptions}
    return contract.role or role, {k: v for k, v in described.items() if k in schema.names}


def refuse_inferred_creation(
    rt: ZerobusRuntime, table: str, context: dg.OutputContext, key: dg.AssetKey
) -> None:
    """An asset depending on a contract this run cannot see must not create its table by inference."""
    contract_key = undeclared_contract(context, key)
    if contract_key is None or rt.catalog.describe(table) is not None:
        return
    name = contract_key.to_user_string()
    raise dg.Failure(
        description=f"{table} does not exist and {key.to_user_string()} depends on its contract {name}, "
        "whose definition is not part of this run; nothing was sent, so the table is not created from the "
        f"output's inferred schema. Materialize {name} first, or declare the asset with the contract's "
        "definition: @dg.asset(..., metadata=contract.data_metadata, kinds=contract.kinds) or "
        "contract.attach(asset) (build_zerobus_definitions does this for its tables=)",
        metadata={"table": table, "contract": name},
        allow_retries=False,
    )


def ready_table(
    rt: ZerobusRuntime,
    table: str,
    schema: pa.Schema,
    contract: ContractRef | None,
    role: Role | None,
    context: dg.OutputContext,
) -> list[dict[str, str]]:
    """Ready ``table`` for an output of ``schema``: with a contract, refuse the columns it does not
    declare and reconcile the table from it; without one, the columns the write will add (``drift.py``)."""
    if contract is None:
        return added_columns(rt, table, schema)
    refuse_undeclared(table, schema, contract)
    _reconcile_from_contract(rt, table, contract, role, context)
    return []


def create_if_missing(rt: ZerobusRuntime, table: str, schema: pa.Schema, role: Role | None) -> None:
    """Create ``table`` from ``schema`` unless it exists (after a write that sent no batch)."""
    if rt.catalog.describe(table) is None:
        rt.reconcile(table, schema, role=role)


def _reconcile_from_contract(
    rt: ZerobusRuntime, table: str, contract: ContractRef, role: Role | None, context: dg.OutputContext
) -> None:
    """Create or evolve ``table`` from its contract before any row is sent, so the write never creates it
    from the output's inferred schema (a nullable key, a narrower decimal) that every later contract run
    would then refuse. A no-op plan when the contract asset already ran."""
    outcome = rt.reconcile(
        table,
        contract.arrow_schema(table),
        role=role,
        descriptions=contract.descriptions or None,
        tags=contract.tags,
    )
    if outcome.applied:
        context.log.info(
            f"{table}: reconciled from the contract {contract.key.to_user_string()}: {outcome.plan}"
        )
