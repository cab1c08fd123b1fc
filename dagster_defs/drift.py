"""Schema drift of an asset's output, judged before anything is sent.

- A table with a contract asset (``build_contract_asset``; found in the run's asset graph as
  ``<table>__contract`` whether or not it is selected) is the authority: an output column the contract
  does not declare is refused, naming the column and the contract, before any row is sent. Letting the
  write add it would break every later contract run (the contract would have to drop the column).
- Without a contract the table evolves with its outputs (the write's ADD COLUMN), and each added column
  is returned so the IO manager logs it and records it as ``zerobus/schema_changes``.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from dagster_defs.metadata import COLUMN_SCHEMA
from dagster_defs.naming import contract_key_for
from dagster_defs.schemas import arrow_schema_from_column_schema
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.reserved import is_reserved
from zerobus_orchestration.runtime import ZerobusRuntime

SCHEMA_CHANGES = "zerobus/schema_changes"
UNDECLARED_COLUMN = "undeclared_column"


@dataclass(frozen=True)
class ContractRef:
    """The contract asset of a data asset, as its definition declares it."""

    key: dg.AssetKey
    column_schema: dg.TableSchema
    role: Role | None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.column_schema.columns)

    def arrow_schema(self, table: str) -> pa.Schema:
        return arrow_schema_from_column_schema(self.column_schema, table=table)


def contract_of(context: dg.OutputContext | dg.InputContext, key: dg.AssetKey) -> ContractRef | None:
    """The contract asset of ``key`` in this run's asset graph (selected or not), if there is one."""
    try:
        graph = context.step_context.job_def.asset_layer.asset_graph
    except dg.DagsterInvariantViolationError:  # a context built outside a run: no graph to look in
        return None
    contract_key = contract_key_for(key)
    if not graph.has(contract_key):
        return None
    declared: Any = graph.get(contract_key).metadata.get(COLUMN_SCHEMA)
    column_schema = declared.schema if isinstance(declared, dg.TableSchemaMetadataValue) else declared
    if not isinstance(column_schema, dg.TableSchema):
        return None
    role = graph.get(contract_key).metadata.get("zerobus/role")
    return ContractRef(contract_key, column_schema, Role(str(role)) if role else None)


def refuse_undeclared(table: str, schema: pa.Schema, contract: ContractRef) -> None:
    """``WriteBoundaryError`` naming every output column ``contract`` does not declare (none is sent)."""
    declared = set(contract.columns)
    undeclared = [n for n in schema.names if not is_reserved(n) and n not in declared]
    if not undeclared:
        return
    name = contract.key.to_user_string()
    raise WriteBoundaryError(
        f"{table}: column(s) {undeclared} are not declared by the contract {name} "
        f"(declared: {list(contract.columns)}); nothing was sent. Either declare them in the contract "
        f"(build_contract_asset schema= / column_schema= / contract_path=) and materialize {name}, or "
        f"drop them from the asset's output (e.g. df.drop(columns={undeclared!r}))",
        table=table,
        column=undeclared[0],
        kind=UNDECLARED_COLUMN,
        columns=undeclared,
    )


def added_columns(rt: ZerobusRuntime, table: str, schema: pa.Schema) -> list[dict[str, str]]:
    """Output columns an existing ``table`` lacks (the write will add them); none when it is created."""
    state = rt.catalog.describe(table)
    if state is None:
        return []
    return [
        {"change": "add_column", "column": f.name, "type": str(f.type)}
        for f in schema
        if not is_reserved(f.name) and state.column(f.name) is None
    ]


def describe_changes(table: str, changes: Sequence[dict[str, str]]) -> str:
    added = ", ".join(f"{c['column']} ({c['type']})" for c in changes)
    return (
        f"{table}: the output adds column(s) {added} to the table (ADD COLUMN); declare a contract "
        "(build_contract_asset) to refuse undeclared columns instead"
    )
