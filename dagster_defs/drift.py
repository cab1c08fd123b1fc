"""Schema drift of an asset's output, judged before anything is sent.

- A table with a contract (``build_contract_asset``; found in the run's asset graph as
  ``<table>__contract`` whether or not it is selected, else in the data asset's own definition
  metadata, ``contract_definition.py``) is the authority: an output column the contract does not
  declare is refused, naming the column and the contract, before any row is sent. Letting the write
  add it would break every later contract run (the contract would have to drop the column).
- Without a contract the table evolves with its outputs (the write's ADD COLUMN), and each added column
  is returned so the IO manager logs it and records it as ``zerobus/schema_changes``.
"""

from collections.abc import Sequence

import dagster as dg
import pyarrow as pa

from dagster_defs.contract_definition import ContractRef, contract_from_metadata
from dagster_defs.naming import contract_key_for
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.reserved import is_reserved
from zerobus_orchestration.runtime.facade import ZerobusRuntime

SCHEMA_CHANGES = "zerobus/schema_changes"
UNDECLARED_COLUMN = "undeclared_column"


def contract_of(context: dg.OutputContext | dg.InputContext, key: dg.AssetKey) -> ContractRef | None:
    """The contract of asset ``key``, whether or not its contract asset is in this run.

    The contract asset in this run's asset graph (selected or not, as when the UI materialises the data
    asset alone) wins; else the data asset's own definition metadata (``ZerobusContract.data_metadata``),
    which is all ``dg.materialize([data_asset])`` has.
    """
    try:
        graph = context.step_context.job_def.asset_layer.asset_graph
    except dg.DagsterInvariantViolationError:  # a context built outside a run: no graph to look in
        graph = None
    contract_key = contract_key_for(key)
    if graph is not None and graph.has(contract_key):
        found = contract_from_metadata(graph.get(contract_key).metadata)
        if found is not None:
            return found
    own = context.definition_metadata if isinstance(context, dg.OutputContext) else None
    return contract_from_metadata(own)


def undeclared_contract(context: dg.OutputContext, key: dg.AssetKey) -> dg.AssetKey | None:
    """The contract asset key of ``key`` when this run's graph names it (a dependency) but no definition
    of it is at hand: ``dg.materialize([data_asset])`` of an asset with ``deps=[contract.key]`` only."""
    try:
        graph = context.step_context.job_def.asset_layer.asset_graph
    except dg.DagsterInvariantViolationError:
        return None
    contract_key = contract_key_for(key)
    return contract_key if graph.has(contract_key) else None


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
