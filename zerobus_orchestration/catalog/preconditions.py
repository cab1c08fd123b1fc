"""Primary-raw eligibility: may this table be the raw landing table read back through Iceberg?

The predicates work over a ``TableState`` so every backend shares them: the local backend answers
column mapping and UniForm as *emulated* (delta-rs cannot produce them: docs/architecture.md#delta-rs),
the Unity backend passes the real properties and ``DESCRIBE DETAIL`` features. ``check_primary_raw``
re-reads the table on every call (never cached) and returns every condition, met or not, by name.

They are checked, never repaired: the catalog gate (``catalog/catalog_gate.py``) re-checks them on the first
batch of every write and on a timer for long-lived sinks, and refuses an unmet one with
``PreconditionsUnmetError`` naming the table, each condition and the fix (``require_conditions``).
Only a table being created gets the properties, and only the operator's explicit repair
(``DesiredTable.repair``, ``zerobus-orch plan --apply --repair``) sets them on a live table.

Conditions (names are stable; the CLI and errors print them):

- ``registered``: the catalog knows the table (UC registration / local registry row).
- ``iceberg_reads``: ``delta.enableIcebergCompatV2=true`` and ``delta.universalFormat.enabledFormats``
  contains ``iceberg``, backed by the ``icebergCompatV2`` feature, or emulated.
- ``column_mapping``: ``delta.columnMapping.mode`` is ``name`` or ``id``, or emulated.
- ``protocol``: reader/writer versions meet the minimum of the features in use: any reader feature
  needs reader >= 3, any writer feature writer >= 7; real UniForm needs (2, 7) with ``columnMapping``
  and ``icebergCompatV2`` active. Emulated mode must not claim ``icebergCompatV2``.
- ``deletion_vectors_disabled``: neither the property nor an active ``deletionVectors`` feature. This
  one is never emulated away: Iceberg V2 readers cannot apply deletion vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zerobus_orchestration.catalog.base import (
    COLUMN_MAPPING_MODE,
    DELETION_VECTORS,
    EMULATED_COLUMN_MAPPING,
    EMULATED_UNIFORM,
    ICEBERG_COMPAT_V2,
    UNIFORM_FORMATS,
    TableCatalog,
    TableState,
)
from zerobus_orchestration.errors import PreconditionsUnmetError

REGISTERED = "registered"
ICEBERG_READS = "iceberg_reads"
COLUMN_MAPPING = "column_mapping"
PROTOCOL = "protocol"
DELETION_VECTORS_DISABLED = "deletion_vectors_disabled"

FEATURE_ICEBERG_COMPAT_V2 = "icebergCompatV2"
FEATURE_COLUMN_MAPPING = "columnMapping"
FEATURE_DELETION_VECTORS = "deletionVectors"


@dataclass(frozen=True)
class Condition:
    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {'ok' if self.ok else 'UNMET'} ({self.detail})"


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def registered(state: TableState) -> Condition:
    if state.registered:
        return Condition(REGISTERED, True, f"registered as {state.table_id}")
    return Condition(REGISTERED, False, "the table exists but the catalog has no registration; reconcile it")


def iceberg_reads(state: TableState) -> Condition:
    props = state.properties
    declared = _true(props.get(ICEBERG_COMPAT_V2)) and "iceberg" in [
        f.strip().lower() for f in (props.get(UNIFORM_FORMATS) or "").split(",")
    ]
    if not declared:
        return Condition(
            ICEBERG_READS,
            False,
            f"set {ICEBERG_COMPAT_V2}=true and {UNIFORM_FORMATS}=iceberg "
            f"(now {props.get(ICEBERG_COMPAT_V2)!r}, {props.get(UNIFORM_FORMATS)!r})",
        )
    if EMULATED_UNIFORM in state.emulated:
        return Condition(ICEBERG_READS, True, "declared; emulated by the embedded Iceberg mirror")
    if FEATURE_ICEBERG_COMPAT_V2 not in state.protocol.features:
        return Condition(
            ICEBERG_READS, False, f"declared, but the {FEATURE_ICEBERG_COMPAT_V2} feature is not active"
        )
    return Condition(ICEBERG_READS, True, f"declared, {FEATURE_ICEBERG_COMPAT_V2} active")


def column_mapping(state: TableState) -> Condition:
    mode = (state.properties.get(COLUMN_MAPPING_MODE) or "none").strip().lower()
    if mode in ("name", "id"):
        return Condition(COLUMN_MAPPING, True, f"{COLUMN_MAPPING_MODE}={mode}")
    if EMULATED_COLUMN_MAPPING in state.emulated:
        return Condition(COLUMN_MAPPING, True, "emulated (the Iceberg mirror reads by name mapping)")
    return Condition(COLUMN_MAPPING, False, f"set {COLUMN_MAPPING_MODE}=name (now {mode!r})")


def protocol(state: TableState) -> Condition:
    p = state.protocol
    have = f"({p.min_reader_version}, {p.min_writer_version})"
    problems: list[str] = []
    if p.reader_features and p.min_reader_version < 3:
        problems.append(f"reader features {sorted(p.reader_features)} need reader version 3")
    if p.writer_features and p.min_writer_version < 7:
        problems.append(f"writer features {sorted(p.writer_features)} need writer version 7")
    if EMULATED_UNIFORM in state.emulated:
        if FEATURE_ICEBERG_COMPAT_V2 in p.features:
            problems.append(f"embedded mode must not claim the {FEATURE_ICEBERG_COMPAT_V2} feature")
    else:
        if p.min_reader_version < 2 or p.min_writer_version < 7:
            problems.append(f"UniForm needs at least (2, 7), have {have}")
        missing = sorted({FEATURE_ICEBERG_COMPAT_V2, FEATURE_COLUMN_MAPPING} - p.writer_features)
        if missing:
            problems.append(f"writer features {missing} not active")
    if problems:
        return Condition(PROTOCOL, False, "; ".join(problems))
    return Condition(PROTOCOL, True, f"protocol {have} meets its features' minimum")


def deletion_vectors_disabled(state: TableState) -> Condition:
    prop = state.properties.get(DELETION_VECTORS)
    active = FEATURE_DELETION_VECTORS in state.protocol.features
    if _true(prop) or active:
        why = []
        if _true(prop):
            why.append(f"{DELETION_VECTORS}=true")
        if active:
            why.append(f"the {FEATURE_DELETION_VECTORS} feature is active")
        return Condition(
            DELETION_VECTORS_DISABLED,
            False,
            " and ".join(why)
            + f"; Iceberg reads cannot apply deletion vectors: set {DELETION_VECTORS}=false "
            "and purge them (REORG TABLE ... APPLY (PURGE)) or recreate the table",
        )
    return Condition(
        DELETION_VECTORS_DISABLED, True, f"{DELETION_VECTORS}={prop or 'unset'}, feature inactive"
    )


def primary_raw_conditions(state: TableState | None, table: str = "") -> list[Condition]:
    """Every primary-raw condition for ``state`` (``None``: the table does not exist)."""
    if state is None:
        return [Condition(REGISTERED, False, f"table {table} does not exist; reconcile it first")]
    return [
        registered(state),
        iceberg_reads(state),
        column_mapping(state),
        protocol(state),
        deletion_vectors_disabled(state),
    ]


def unmet(conditions: Sequence[Condition]) -> list[Condition]:
    return [c for c in conditions if not c.ok]


def check_primary_raw(catalog: TableCatalog, table: str) -> list[Condition]:
    """Re-read ``table`` now and evaluate every condition (never cached)."""
    return primary_raw_conditions(catalog.describe(table), table)


def require_primary_raw(catalog: TableCatalog, table: str) -> list[Condition]:
    """``check_primary_raw``, raising ``PreconditionsUnmetError`` naming every unmet condition."""
    return require_conditions(table, check_primary_raw(catalog, table))


def require_conditions(table: str, conditions: Sequence[Condition]) -> list[Condition]:
    """``conditions`` back, or ``PreconditionsUnmetError`` naming the table, each unmet one and the fix.

    Nothing here changes the table: a property flipped under a running pipeline is refused, and only
    the operator's explicit repair (or the SQL in the message) sets it back.
    """
    missing = unmet(conditions)
    if missing:
        raise PreconditionsUnmetError(
            f"table {table} is not eligible as primary_raw; unmet: "
            + "; ".join(f"{c.name} ({c.detail})" for c in missing)
            + ". Nothing was sent, and the table is not set back automatically. "
            + repair_hint(table, missing),
            [c.name for c in missing],
            table=table,
        )
    return list(conditions)


def repair_properties(missing: Sequence[Condition]) -> dict[str, str]:
    """The table properties that answer the unmet ``missing`` conditions (protocol ones have none)."""
    names = {c.name for c in missing}
    props: dict[str, str] = {}
    if DELETION_VECTORS_DISABLED in names:
        props[DELETION_VECTORS] = "false"  # first: IcebergCompatV2 refuses deletion vectors
    if COLUMN_MAPPING in names:
        props[COLUMN_MAPPING_MODE] = "name"
    if ICEBERG_READS in names:
        props[ICEBERG_COMPAT_V2] = "true"
        props[UNIFORM_FORMATS] = "iceberg"
    return props


def repair_hint(table: str, missing: Sequence[Condition]) -> str:
    """The fix for ``missing``: the explicit repair command and the equivalent SQL."""
    from zerobus_orchestration.catalog.ddl import set_properties_sql

    hint = (
        "Fix: repair it explicitly with `zerobus-orch plan --table "
        f"{table} --role primary_raw --schema-from <file> --apply --repair` "
        "(sets the primary-raw properties and registers the table)"
    )
    props = repair_properties(missing)
    if props:
        hint += f", or run: {set_properties_sql(table, props)}"
    if any(c.name == DELETION_VECTORS_DISABLED for c in missing):
        hint += "; deletion vectors already written must be purged (REORG TABLE ... APPLY (PURGE))"
    return hint
