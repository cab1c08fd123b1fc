"""Asset key -> ``catalog.schema.table``, per-asset options, and the coverage keys of a write.

Naming follows Dagster's DB IO managers so users keep one mental model:

- ``table`` = last part of the asset key, unless definition metadata ``zerobus/table`` names it;
- ``schema`` = definition metadata ``schema`` (or ``zerobus/schema``) > the IO manager's ``schema`` >
  the asset key prefix (the part before the table) > ``default``;
- ``catalog`` = the IO manager's ``catalog``.

``zerobus/table`` may also be a full three-part name, which then wins over everything else.

Coverage keys (docs/guides/coverage-and-resume.md): ``source`` is the asset key joined by ``/``; ``partition``
is ``"<partition key or ''>@<run id>"``, so every run appends its own coverage and a retried step of the
same run resumes where the previous attempt stopped. The run id is the run group's *root* run id: a
re-execution (from failure, of all steps, or an automatic run retry) gets a new run id but shares the
root's coverage, so it resumes instead of sending every row again. A new run appends.

A recovery run requested by the read-back sensor is a new run, not a re-execution; its tags
``zerobus/resume_source`` and ``zerobus/resume_partition`` name the original materialisation's coverage,
and the write of that source (same partition key) resumes it instead of appending a second copy.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.write_modes import WriteMode

DEFAULT_SCHEMA = "default"

# Definition-metadata keys this integration reads (validated by ``AssetOptions``).
META_TABLE = "zerobus/table"
META_SCHEMA = "zerobus/schema"
META_ROLE = "zerobus/role"
META_PARTITION_EXPR = "partition_expr"
META_WRITE_MODE = "zerobus/write_mode"
META_ALLOW_RAW_REPLACE = "zerobus/allow_raw_replace"
META_SCHEMA_PLAIN = "schema"

# Run tags of a read-back recovery run: which write's coverage the run resumes (see the module docstring).
RESUME_SOURCE_TAG = "zerobus/resume_source"
RESUME_PARTITION_TAG = "zerobus/resume_partition"


class AssetOptions(BaseModel):
    """Per-asset options read from definition metadata; a bad value fails loudly with the key named."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    table: str | None = Field(None, alias=META_TABLE)
    zerobus_schema: str | None = Field(None, alias=META_SCHEMA)
    plain_schema: str | None = Field(None, alias=META_SCHEMA_PLAIN)
    role: Role | None = Field(None, alias=META_ROLE)
    partition_expr: str | None = Field(None, alias=META_PARTITION_EXPR)
    write_mode: WriteMode | None = Field(None, alias=META_WRITE_MODE)
    allow_raw_replace: bool | None = Field(None, alias=META_ALLOW_RAW_REPLACE)

    @property
    def schema_override(self) -> str | None:
        return self.zerobus_schema or self.plain_schema

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None, *, where: str) -> "AssetOptions":
        raw = {k: _plain(v) for k, v in (metadata or {}).items()}
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ConfigError(f"{where}: invalid zerobus metadata ({problems})") from None


def _plain(value: Any) -> Any:
    """Metadata values may arrive wrapped (``TextMetadataValue``); options want the raw value."""
    if isinstance(value, dg.MetadataValue):
        return value.value
    return value


@dataclass(frozen=True)
class TableRef:
    catalog: str
    schema: str
    table: str

    @property
    def full_name(self) -> str:
        return TableName(self.catalog, self.schema, self.table).full_name


def table_ref(
    asset_key: dg.AssetKey,
    *,
    catalog: str,
    schema: str | None = None,
    options: AssetOptions | None = None,
) -> TableRef:
    """Where the asset's rows live; see the module docstring for the precedence."""
    opts = options or AssetOptions()
    if opts.table and "." in opts.table:
        parsed = TableName.parse(opts.table)
        return TableRef(parsed.catalog, parsed.schema, parsed.table)
    table = opts.table or asset_key.path[-1]
    prefix = asset_key.path[:-1]
    resolved_schema = opts.schema_override or schema or (prefix[-1] if prefix else None) or DEFAULT_SCHEMA
    for part, what in ((catalog, "catalog"), (resolved_schema, "schema"), (table, "table")):
        if not part:
            raise ConfigError(
                f"asset {asset_key.to_user_string()}: empty {what} name; set the {what} explicitly"
            )
    return TableRef(catalog, resolved_schema, table)


def source_for(asset_key: dg.AssetKey) -> str:
    """Coverage ``source`` of an asset: its key joined by ``/``."""
    return "/".join(asset_key.path)


def partition_for(run_id: str, partition_key: str | None) -> str:
    """Coverage ``partition`` of one write: ``"<partition key or ''>@<run_id>"``."""
    return f"{partition_key or ''}@{run_id}"


def resumed_partition(tags: Mapping[str, str], source: str, partition_key: str | None) -> str | None:
    """The original coverage partition a recovery run's tags ask this write to resume, if they match.

    Only for the tagged source and the same partition key: any other write of the run (another asset,
    another partition) must not adopt that coverage, or it would skip rows it never sent.
    """
    wanted = tags.get(RESUME_PARTITION_TAG)
    if not wanted or tags.get(RESUME_SOURCE_TAG) != source:
        return None
    return wanted if wanted.rpartition("@")[0] == (partition_key or "") else None


def write_partition(run: dg.DagsterRun, source: str, partition_key: str | None) -> str:
    """Coverage ``partition`` of a write in ``run``: a recovery run's tagged original, else keyed by the
    root run id (``root_run_id`` is unset on a run that is not a re-execution)."""
    resumed = resumed_partition(run.tags, source, partition_key)
    if resumed is not None:
        return resumed
    return partition_for(run.root_run_id or run.run_id, partition_key)


def contract_key_for(asset_key: dg.AssetKey) -> dg.AssetKey:
    """``raw/orders`` -> ``raw/orders__contract`` (same prefix, so it sits beside its table in the UI)."""
    return dg.AssetKey([*asset_key.path[:-1], f"{asset_key.path[-1]}__contract"])


def coverage_keys(context: dg.AssetExecutionContext) -> tuple[str, str]:
    """``(source, partition)`` for an asset that writes through ``ZerobusResource.write`` itself."""
    partition_key = context.partition_key if context.has_partition_key else None
    source = source_for(context.asset_key)
    return source, write_partition(context.run, source, partition_key)
