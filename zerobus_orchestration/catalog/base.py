"""The catalog seam: ``TableCatalog`` and the values it trades in.

Every backend (``local``: Delta log + SQLite registry; ``unity``: databricks-sdk) implements
``TableCatalog``. They share the pure planner (``catalog/plan.py``), the DDL renderer (``catalog/ddl.py``)
and the primary-raw predicates (``catalog/preconditions.py``), all of which work over the values defined here:

- ``DesiredTable``: what the producer needs (Arrow schema + reserved columns, role, properties,
  creation-only properties, column descriptions, evolution policy). Built with ``DesiredTable.build``.
- ``TableState``: what the catalog has (columns with Delta type text and Arrow type, properties,
  protocol, identity, registration, emulated capabilities). ``None`` from ``describe`` = absent.
- ``ReconcileOutcome``: the plan that was executed and the state after it.
- ``VendedCredentials``: short-lived storage credentials; secrets are ``SecretStr``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa

from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.errors import ConfigError, UnsupportedType
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import (
    RESERVED_DESCRIPTIONS,
    RESERVED_FIELDS,
    is_reserved,
    reserved_case_twin,
)
from zerobus_orchestration.storage import Access as Access  # re-exported: value types of storage
from zerobus_orchestration.storage import VendedCredentials as VendedCredentials
from zerobus_orchestration.type_map import arrow_storage_type, arrow_type_of_delta, delta_type

if TYPE_CHECKING:
    from zerobus_orchestration.catalog.steps import ReconcilePlan

# Table property keys we own (custom ``twg.*`` keys; delta-rs accepts them only through
# ``DeltaTable.create(raise_if_key_not_exists=False)`` / ``set_table_properties``).
PROP_ROLE = "twg.role"
PROP_OWNER = "twg.owner"
PROP_CONTRACT_URI = "twg.contract.uri"
PROP_CONTRACT_VERSION = "twg.contract.version"
PROP_SOURCE = "twg.source"

# Delta / UniForm property keys the primary-raw role is about.
ICEBERG_COMPAT_V2 = "delta.enableIcebergCompatV2"
UNIFORM_FORMATS = "delta.universalFormat.enabledFormats"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
DELETION_VECTORS = "delta.enableDeletionVectors"
# Which columns Delta writers (Databricks, delta-rs) keep file statistics of: the first
# ``delta.dataSkippingNumIndexedCols`` (default 32) leaf columns, or the ones ``STATS_COLUMNS`` names.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
NUM_INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
DEFAULT_INDEXED_COLUMNS = 32
COLUMN_MAPPING_MODES = frozenset({"name", "id"})  # the values that turn column mapping on
# Characters Delta refuses in any column or nested field name unless column mapping is on
# (DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES): without it the name is the Parquet column name.
CHARS_NEEDING_COLUMN_MAPPING = frozenset(" ,;{}()\n\t=")

# Capability names a backend may report as emulated (embedded mode cannot produce them for real).
EMULATED_COLUMN_MAPPING = "columnMapping"
EMULATED_UNIFORM = "uniform"


def primary_raw_properties(*, real_column_mapping: bool) -> dict[str, str]:
    """Properties a primary-raw table is created with.

    The local backend passes ``real_column_mapping=False``: delta-rs cannot evolve a column-mapped table
    (docs/architecture.md#delta-rs), so column mapping is emulated there and the UniForm keys are
    inert strings.
    """
    props = {ICEBERG_COMPAT_V2: "true", UNIFORM_FORMATS: "iceberg", DELETION_VECTORS: "false"}
    if real_column_mapping:
        props[COLUMN_MAPPING_MODE] = "name"
    return props


@dataclass(frozen=True)
class TableTags:
    """Ownership and provenance stamped as ``twg.*`` table properties."""

    owner: str | None = None
    contract_uri: str | None = None
    contract_version: str | None = None
    source: str | None = None

    def properties(self) -> dict[str, str]:
        pairs = {
            PROP_OWNER: self.owner,
            PROP_CONTRACT_URI: self.contract_uri,
            PROP_CONTRACT_VERSION: self.contract_version,
            PROP_SOURCE: self.source,
        }
        return {k: v for k, v in pairs.items() if v is not None}


@dataclass(frozen=True)
class DesiredColumn:
    name: str
    arrow_type: pa.DataType  # as handed to us; the planner maps it through ``type_map.arrow_storage_type``
    nullable: bool
    description: str | None  # None: no authority has a description, the live comment is left alone
    engine_owned: bool


@dataclass(frozen=True)
class DesiredTable:
    """What a producer needs from the table. Build with ``DesiredTable.build``."""

    name: str
    columns: tuple[DesiredColumn, ...]
    role: Role
    properties: Mapping[str, str]
    allow_widening: bool = False
    comment_policy: CommentPolicy = CommentPolicy.RESPECT
    # True when the schema is one producer's batch (Zerobus lets producers omit nullable columns):
    # live columns missing from it are left alone instead of being refused as drops.
    subset: bool = False
    # Set only when the table is created (``CreateTable``), never diffed against a live table: the
    # primary-raw properties (a drifted live value is refused by ``catalog/preconditions.py``, not set back)
    # and ``twg.source`` (the source the table was created for; later writers of other sources must
    # not flip it back and forth).
    create_properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The operator's explicit request (``zerobus-orch plan --apply --repair``) to set the creation
    # properties on an existing table too, i.e. to repair drifted primary-raw properties.
    repair: bool = False

    @classmethod
    def build(
        cls,
        name: str,
        schema: pa.Schema,
        role: Role,
        *,
        descriptions: Mapping[str, str] | None = None,
        tags: TableTags | None = None,
        properties: Mapping[str, str] | None = None,
        allow_widening: bool = False,
        comment_policy: CommentPolicy = CommentPolicy.RESPECT,
        subset: bool = False,
        create_properties: Mapping[str, str] | None = None,
        repair: bool = False,
    ) -> DesiredTable:
        """Payload columns from ``schema`` plus the reserved columns (always present, always described).

        Reserved columns in ``schema`` must have the reserved types; payload descriptions come from
        ``descriptions`` (see ``contracts.py``), reserved ones from ``reserved.RESERVED_DESCRIPTIONS``.
        """
        payload_descriptions = dict(descriptions or {})
        columns: list[DesiredColumn] = []
        seen: set[str] = set()
        folded: dict[str, str] = {}
        for f in schema:
            unnamed = _unnamed_field(f)
            if unnamed is not None:
                # Delta and Unity Catalog cannot hold a column (or struct field) without a name.
                raise ConfigError(
                    f"table {name}: {unnamed} has an empty name; Delta and Unity Catalog need every column "
                    "and struct field named. Fix: name it (or drop it) before writing"
                )
            if f.name in seen:
                raise ConfigError(f"table {name}: column {f.name!r} appears twice in the schema")
            seen.add(f.name)
            twin = folded.setdefault(f.name.lower(), f.name)
            if twin != f.name:
                # Delta and Unity Catalog match column names case-insensitively: these are one column.
                raise ConfigError(
                    f"table {name}: columns {twin!r} and {f.name!r} differ only in case; Delta and Unity "
                    "Catalog column names are case-insensitive, rename one of them"
                )
            if is_reserved(f.name):
                continue
            engine_twin = reserved_case_twin(f.name)
            if engine_twin is not None:
                # Refused here, before any DDL: delta-rs would fail the create with a raw duplicate-field
                # error and Unity Catalog with COLUMN_ALREADY_EXISTS, which reads like a lost race.
                raise ConfigError(
                    f"table {name}: column {f.name!r} differs only in case from the engine-owned column "
                    f"{engine_twin!r} (Delta and Unity Catalog column names are case-insensitive); rename "
                    f"the payload column, e.g. {_payload_rename(f.name)!r}"
                )
            columns.append(
                DesiredColumn(
                    f.name, f.type, f.nullable, payload_descriptions.get(f.name), engine_owned=False
                )
            )
        if not columns:
            raise ConfigError(
                f"table {name}: the schema has no columns of its own (only engine-owned ones, or none); a "
                "table needs at least one payload column. Fix: send the data's columns"
            )
        for rf in RESERVED_FIELDS:
            incoming = schema.field(rf.name) if rf.name in seen else None
            if incoming is not None and not _same_storage(incoming.type, rf.type):
                raise ConfigError(
                    f"table {name}: column {rf.name!r} is engine-owned ({rf.type}) but the schema declares "
                    f"{incoming.type}; rename the payload column"
                )
            columns.append(
                DesiredColumn(
                    rf.name, rf.type, rf.nullable, RESERVED_DESCRIPTIONS[rf.name], engine_owned=True
                )
            )
        unknown = sorted(set(payload_descriptions) - {c.name for c in columns})
        if unknown:
            raise ConfigError(f"table {name}: descriptions given for unknown columns {unknown}")
        props = {PROP_ROLE: role.value, **(tags.properties() if tags else {}), **dict(properties or {})}
        creation = dict(create_properties or {})
        if STATS_COLUMNS not in props and STATS_COLUMNS not in creation and NUM_INDEXED_COLUMNS not in props:
            stats = _stats_columns_keeping_reserved(columns)
            if stats is not None:
                creation[STATS_COLUMNS] = stats
        return cls(
            name=name,
            columns=tuple(columns),
            role=role,
            properties=MappingProxyType(props),
            allow_widening=allow_widening,
            comment_policy=comment_policy,
            subset=subset,
            create_properties=MappingProxyType(creation),
            repair=repair,
        )

    def column(self, name: str) -> DesiredColumn | None:
        return next((c for c in self.columns if c.name == name), None)

    def with_properties(self, extra: Mapping[str, str]) -> DesiredTable:
        """A copy with ``extra`` merged under the explicit properties (explicit ones win)."""
        merged = {**dict(extra), **dict(self.properties)}
        return replace(self, properties=MappingProxyType(merged))

    def with_create_properties(self, extra: Mapping[str, str]) -> DesiredTable:
        """A copy with ``extra`` merged under the creation-only properties (explicit ones win)."""
        merged = {**dict(extra), **dict(self.create_properties)}
        return replace(self, create_properties=MappingProxyType(merged))

    def with_role_properties(self, extra: Mapping[str, str]) -> DesiredTable:
        """``extra`` (a role's required properties) set at creation, or on a live table when repairing.

        Without ``repair`` a drifted live value is left for the preconditions to refuse, never set back.
        """
        return self.with_properties(extra) if self.repair else self.with_create_properties(extra)

    def creation_properties(self) -> dict[str, str]:
        """What ``CreateTable`` declares: the creation-only properties under the explicit ones."""
        return {**dict(self.create_properties), **dict(self.properties)}

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns])


def _leaf_count(arrow_type: pa.DataType) -> int:
    """Columns a type counts as toward Delta's statistics budget (a struct counts its fields)."""
    if pa.types.is_struct(arrow_type):
        return sum(_leaf_count(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return 1


def _stats_column_name(name: str) -> str:
    plain = name.replace("_", "a").isalnum() and name.isascii() and not name[0].isdigit()
    return name if plain else "`" + name.replace("`", "``") + "`"


def _stats_columns_keeping_reserved(columns: Sequence[DesiredColumn]) -> str | None:
    """``delta.dataSkippingStatsColumns`` for a table whose reserved columns fall outside the first 32.

    Resume and read-back prune files by the statistics of ``_twg_source`` and ``_twg_emit_ts``
    (docs/adr/0002-coverage-home.md), and the reserved columns come last: past 29 payload leaf columns
    no writer would keep their statistics, and every resume would read the whole table. Named instead:
    the payload columns the default would have covered, then the reserved ones. None: the default
    already covers them.
    """
    payload = [c for c in columns if not c.engine_owned]
    reserved = [c for c in columns if c.engine_owned]
    budget = DEFAULT_INDEXED_COLUMNS - sum(_leaf_count(c.arrow_type) for c in reserved)
    if sum(_leaf_count(c.arrow_type) for c in payload) <= budget:
        return None
    named: list[str] = []
    for column in payload:
        budget -= _leaf_count(column.arrow_type)
        if budget < 0:
            break
        named.append(_stats_column_name(column.name))
    return ",".join([*named, *(c.name for c in reserved)])


@dataclass(frozen=True)
class LiveColumn:
    name: str
    delta_type: str  # Databricks SQL type text, e.g. ``BIGINT``, ``STRUCT<a: INT>``
    arrow_type: pa.DataType  # the canonical Arrow type for ``delta_type`` (``type_map.arrow_type_of_delta``)
    nullable: bool
    comment: str | None

    @classmethod
    def from_delta_field(cls, field: Mapping[str, Any]) -> LiveColumn:
        """From a Delta StructField as JSON (the ``_delta_log`` schema, or Unity ``ColumnInfo.type_json``)."""
        arrow = arrow_type_of_delta(field["type"])
        comment = (field.get("metadata") or {}).get("comment")
        return cls(
            name=str(field["name"]),
            delta_type=delta_type(arrow),
            arrow_type=arrow,
            nullable=bool(field.get("nullable", True)),
            comment=str(comment) if comment is not None else None,
        )


@dataclass(frozen=True)
class ProtocolInfo:
    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] = frozenset()
    writer_features: frozenset[str] = frozenset()

    @property
    def features(self) -> frozenset[str]:
        return self.reader_features | self.writer_features


@dataclass(frozen=True)
class TableState:
    """What the catalog has for one table, re-read on every ``describe`` (never cached)."""

    name: str
    columns: tuple[LiveColumn, ...]
    properties: Mapping[str, str]
    protocol: ProtocolInfo
    table_id: str | None
    location: str | None
    version: int | None
    registered: bool
    role: Role | None = None
    emulated: frozenset[str] = frozenset()  # e.g. {"columnMapping", "uniform"} in embedded mode
    sinks: tuple[str, ...] = ()

    def column(self, name: str) -> LiveColumn | None:
        return next((c for c in self.columns if c.name == name), None)

    def arrow_schema(self) -> pa.Schema:
        """The declared target schema: what the sink must send (canonical Arrow types, live nullability)."""
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns])


@dataclass(frozen=True)
class TableLocation:
    """Where one live table's Delta log is and whether this catalog registered it: all a reader of the
    log needs (``locate``), without the columns, properties and protocol ``describe`` reads."""

    name: str
    location: str | None
    registered: bool


@dataclass(frozen=True)
class ReconcileOutcome:
    plan: ReconcilePlan
    applied: bool  # False for an empty plan (nothing was executed, no new table version)
    version_before: int | None
    state: TableState
    notes: tuple[str, ...] = field(default=())  # e.g. human-edited managed comments kept under RESPECT

    @property
    def version_after(self) -> int | None:
        return self.state.version


@dataclass(frozen=True)
class RowsOfSources:
    """The rows whose ``_twg_source`` is one of ``tags``: what a ``replace`` write deletes (the runs it
    supersedes). A value, not SQL text: each backend renders it (``ddl.delete_rows_sql`` on Unity)."""

    tags: tuple[str, ...]


COPY_COLUMN = "_twg_copy"  # the window column a dedupe numbers the copies of one position with


@dataclass(frozen=True)
class PositionsHeldTwice:
    """Positions of the table held more than once: per ``_twg_source`` tag, half-open ``_twg_offset``
    ranges. What ``repair --dedupe`` rewrites so that each position is held once (at-least-once delivery
    re-sends rows; their copies differ at most in ``_twg_emit_ts``). A value: each backend renders it."""

    spans: tuple[tuple[str, OffsetRange], ...]


@runtime_checkable
class TableCatalog(Protocol):
    """Create, evolve, describe and vouch for Delta tables. Backends: ``local``, ``unity``."""

    def describe(self, table: str) -> TableState | None:
        """The live table, re-read now; ``None`` when it does not exist."""
        ...

    def locate(self, table: str) -> TableLocation | None:
        """Where the live table's Delta log is, re-read now; ``None`` when it does not exist. What a
        reader of the log asks before every read, cheaper than ``describe`` (on Unity one REST call and
        no SQL statement, against ``describe``'s REST call and two statements)."""
        ...

    def latest_version(self, table: str) -> int | None:
        """The live table's newest Delta version, re-read now; ``None`` when it does not exist (on Unity
        one REST call and one SQL statement)."""
        ...

    def plan(self, table: str, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute now (with the backend's role properties); nothing runs."""
        ...

    def plan_against(self, live: TableState | None, desired: DesiredTable) -> ReconcilePlan:
        """``plan`` against ``live``, a ``describe`` the caller already holds (``None``: no table), so
        a caller that also checks the live table reads the catalog once (on Unity each read is a REST
        call and two SQL statements)."""
        ...

    def reconcile(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        """Plan (``plan.plan``), raise ``PlanRefusedError`` on any ``Refuse`` step, else execute.

        Idempotent: an empty plan executes nothing (no new table version).
        """
        ...

    def register_sink(self, table: str, sink_id: str) -> None:
        """Record that ``sink_id`` writes to ``table`` (idempotent)."""
        ...

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        """Short-lived storage credentials, or ``NotSupportedError`` where the backend cannot grant them."""
        ...

    def delete_rows(self, table: str, rows: RowsOfSources) -> None:
        """Delete ``rows`` from ``table`` in one commit (never on the ingest path; ``replace`` writes)."""
        ...

    def keep_one_copy(self, table: str, positions: PositionsHeldTwice) -> None:
        """Rewrite the rows at ``positions`` so each position is held once (the copy stamped first), in
        one commit; rows at other positions are untouched (``repair --dedupe``)."""
        ...


def _payload_rename(name: str) -> str:
    # Without the leading underscore it no longer matches any reserved name, in any case.
    return name.lstrip("_")


def _unnamed_field(f: pa.Field, path: str = "") -> str | None:
    """Where ``f`` (or a struct field nested in it, through lists and maps) has an empty name, or None."""
    where = f"{path}.{f.name}" if path else f.name
    if not f.name:
        return f"struct field {path + '.<empty>'!r}" if path else "a column"
    t = f.type
    if pa.types.is_struct(t):
        return next((u for i in range(t.num_fields) if (u := _unnamed_field(t.field(i), where))), None)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _unnamed_field(pa.field("element", t.value_type), where)
    if pa.types.is_map(t):
        return _unnamed_field(pa.field("value", t.item_type), where)
    return None


def _same_storage(incoming: pa.DataType, reserved: pa.DataType) -> bool:
    try:
        return bool(arrow_storage_type(incoming) == reserved)
    except UnsupportedType:
        return False


def names(columns: Iterable[LiveColumn | DesiredColumn]) -> list[str]:
    return [c.name for c in columns]
