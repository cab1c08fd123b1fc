"""A table contract as definition metadata, so the contract reaches every run that writes the table.

The contract asset (``build_contract_asset``) and its data asset (``ZerobusContract.data_metadata`` /
``ZerobusContract.attach``, which ``build_zerobus_definitions`` applies) carry the same definition
metadata: ``dagster/table_name``, ``dagster/column_schema`` (the declared columns, SQL types and
descriptions), ``zerobus/role``, ``zerobus/contract`` (the contract asset's key) and the ownership tags.
The IO manager reads it back as a ``ContractRef`` and reconciles the table from it before a write, so
materialising the data asset without its contract asset still creates the table from the contract,
never from the output's inferred schema (which would make every later contract run fail: a nullable
key, a narrower decimal).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from dagster_defs.metadata import (
    COLUMN_SCHEMA,
    column_schema_from_arrow,
    descriptions_from_column_schema,
    metadata_value,
)
from dagster_defs.naming import META_ROLE, META_TABLE
from dagster_defs.schemas import arrow_schema_from_column_schema
from zerobus_orchestration.catalog.base import TableTags
from zerobus_orchestration.config import Role

CONTRACT = "zerobus/contract"
TABLE_NAME = "dagster/table_name"
OWNER = "zerobus/owner"
CONTRACT_URI = "zerobus/contract_uri"
CONTRACT_VERSION = "zerobus/contract_version"
# What the catalog UI shows on a Zerobus table's assets: Delta tables in Databricks.
TABLE_KINDS: frozenset[str] = frozenset({"databricks", "delta"})
_MAX_KINDS = 3  # Dagster refuses an asset with more kinds


@dataclass(frozen=True)
class ContractRef:
    """The contract of one table, as its definition metadata declares it."""

    key: dg.AssetKey
    table: str | None
    column_schema: dg.TableSchema
    role: Role | None
    tags: TableTags | None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.column_schema.columns)

    @property
    def descriptions(self) -> dict[str, str]:
        return descriptions_from_column_schema(self.column_schema)

    def arrow_schema(self, table: str) -> pa.Schema:
        return arrow_schema_from_column_schema(self.column_schema, table=table)


def definition_metadata(
    *,
    contract_key: dg.AssetKey,
    table: str,
    schema: pa.Schema,
    descriptions: Mapping[str, str],
    role: Role,
    tags: TableTags | None,
) -> dict[str, Any]:
    """The metadata both the contract asset and its data asset declare."""
    metadata: dict[str, Any] = {
        TABLE_NAME: table,
        META_TABLE: table,
        COLUMN_SCHEMA: column_schema_from_arrow(schema, descriptions),
        META_ROLE: role.value,
        CONTRACT: contract_key.to_user_string(),
    }
    if tags is not None:
        for key, value in ((OWNER, tags.owner), (CONTRACT_URI, tags.contract_uri)):
            if value is not None:
                metadata[key] = value
        if tags.contract_version is not None:
            metadata[CONTRACT_VERSION] = tags.contract_version
    return metadata


def _optional_text(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata_value(metadata, key)
    return None if value is None else str(value)


def contract_from_metadata(metadata: Mapping[str, Any] | None) -> ContractRef | None:
    """The contract declared by ``metadata`` (``definition_metadata``'s keys), or None without one."""
    if not metadata:
        return None
    contract = _optional_text(metadata, CONTRACT)
    declared = metadata.get(COLUMN_SCHEMA)
    column_schema = declared.schema if isinstance(declared, dg.TableSchemaMetadataValue) else declared
    if contract is None or not isinstance(column_schema, dg.TableSchema):
        return None
    role = _optional_text(metadata, META_ROLE)
    owner, uri = _optional_text(metadata, OWNER), _optional_text(metadata, CONTRACT_URI)
    version = _optional_text(metadata, CONTRACT_VERSION)
    tags = (
        TableTags(owner=owner, contract_uri=uri, contract_version=version)
        if owner or uri or version
        else None
    )
    return ContractRef(
        key=dg.AssetKey.from_user_string(contract),
        table=_optional_text(metadata, META_TABLE),
        column_schema=column_schema,
        role=Role(role) if role else None,
        tags=tags,
    )


def with_table_kinds(kinds: set[str]) -> set[str]:
    """``kinds`` plus ``databricks`` and ``delta`` as far as Dagster's limit of three kinds allows."""
    merged = set(kinds)
    for kind in sorted(TABLE_KINDS):
        if len(merged) < _MAX_KINDS:
            merged.add(kind)
    return merged
