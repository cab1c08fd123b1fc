"""Reconcile plans are values: ``plan(live, desired)`` is a pure diff.

Steps (their types are in ``catalog/steps.py``): ``CreateTable``, ``AddColumn``, ``WidenColumn``,
``SetComment``, ``SetProperty`` and ``Refuse``.
Backends execute the non-refusing steps (local: delta-rs; unity: SQL from ``catalog/ddl.py``);
any ``Refuse`` stops the whole plan with ``PlanRefusedError`` before anything runs. A plan with no
steps means the table already is what was asked for: executing it must create no new table version.

Rules:
- new nullable columns are added; a new NOT NULL column is refused (existing rows have no value);
- a live column missing from the desired schema is refused as a drop or rename, unless the desired
  table is a producer's subset (``DesiredTable.subset``: Zerobus lets producers omit nullable columns);
- a type change is planned as ``WidenColumn`` only with ``allow_widening`` and when ``can_widen_to``
  allows it (``iceberg_legal_widening`` for ``primary_raw`` tables); narrowing and conflicts are refused.
  For a producer subset only the widening rule applies: whether a narrower or different type can be
  written is the write guard's decision (``catalog/guard.py``), which names the precise fix;
- comments follow ``contracts.py``: rewritten only when the description's hash changed; a human edit
  is kept and reported (``RESPECT``) or overwritten (``RESTORE``);
- a derived table created by a write with no contract (its types inferred from the first run's data)
  declares its top-level decimals ``DECIMAL(38, s)`` (``type_map.roomy_decimal``): the first rows'
  precision says nothing about the next run's values. A contract or an explicit plan keeps its types;
- desired properties that differ from the live ones are set; other live properties are left alone.
  Creation-only properties (``DesiredTable.create_properties``: a role's required properties, the
  ``twg.source`` stamp) are declared by ``CreateTable`` and never diffed against a live table, so a
  primary-raw property flipped under a running pipeline is refused by the preconditions, not set back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from zerobus_orchestration.catalog.base import (
    CHARS_NEEDING_COLUMN_MAPPING,
    COLUMN_MAPPING_MODE,
    COLUMN_MAPPING_MODES,
    PROP_CONTRACT_URI,
    DesiredColumn,
    DesiredTable,
    LiveColumn,
    TableState,
)
from zerobus_orchestration.catalog.steps import (
    AddColumn,
    ColumnDef,
    CreateTable,
    ReconcilePlan,
    Refuse,
    SetComment,
    SetProperty,
    Step,
    WidenColumn,
)
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import CommentStatus, comment_status, managed_comment
from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.type_map import (
    arrow_storage_type,
    can_widen_to,
    delta_type,
    iceberg_legal_widening,
    roomy_decimal,
)
from zerobus_orchestration.wire_schema import arrow_column_problems

WIDENING_FIX = (
    "set catalog.allow_widening = true in the [zerobus] config (environment: "
    "ZEROBUS_CATALOG__ALLOW_WIDENING=true)"
)
"""The one spelling of the opt-in every refusal of a widening names: the setting, not a keyword."""

__all__ = [
    "WIDENING_FIX",
    "AddColumn",
    "ColumnDef",
    "CreateTable",
    "ReconcilePlan",
    "Refuse",
    "SetComment",
    "SetProperty",
    "Step",
    "WidenColumn",
    "column_mapping_first",
    "names_needing_column_mapping",
    "plan",
]


def plan(live: TableState | None, desired: DesiredTable, allow_widening: bool = False) -> ReconcilePlan:
    """The steps turning ``live`` (``None``: absent) into ``desired``. Pure: reads nothing else."""
    table = desired.name
    if live is None:
        return _plan_create(desired)
    steps: list[Step] = []
    comments: list[Step] = []
    notes: list[str] = []
    desired_names = {c.name.lower() for c in desired.columns}  # a case twin is refused above
    for col in desired.columns:
        current = live.column(col.name)
        storage = _storage_or_refuse(table, col, steps)
        if storage is None:
            continue
        if current is None:
            twin = next((c for c in live.columns if c.name.lower() == col.name.lower()), None)
            if twin is not None:
                # Delta/UC names are case-insensitive: adding it would collide with the live column.
                # An engine-owned name cannot be respelled (the sink stamps it), so the live one must go.
                fix = (
                    f"rename the live column {twin.name!r} (the engine stamps {col.name!r} on every row)"
                    if col.engine_owned
                    else f"spell it {twin.name!r}"
                )
                steps.append(
                    Refuse(
                        table,
                        col.name,
                        f"live column {twin.name!r} differs only in case (column names are "
                        f"case-insensitive); {fix}",
                        twin.delta_type,
                        delta_type(storage),
                    )
                )
                continue
            if not col.nullable:
                steps.append(
                    Refuse(
                        table,
                        col.name,
                        "new column is NOT NULL; existing rows have no value, declare it nullable",
                        None,
                        delta_type(storage),
                    )
                )
                continue
            comment = managed_comment(col.description) if col.description else None
            steps.append(AddColumn(table, ColumnDef(col.name, delta_type(storage), storage, True, comment)))
            continue
        _plan_type(table, live, desired, col, current, storage, allow_widening, steps)
        _plan_nullability(table, desired, col, current, steps)
        _plan_comment(table, desired.comment_policy, col, current, comments, notes)
    for gone in live.columns:
        if gone.name.lower() in desired_names:
            continue
        if desired.subset and gone.nullable:
            continue  # a producer may omit a nullable column
        reason = (
            "NOT NULL column is missing from the producer's schema; send it"
            if desired.subset
            else "column is missing from the desired schema; dropping or renaming columns is not supported, "
            "keep it (nullable columns may be left unset)"
        )
        steps.append(Refuse(table, gone.name, reason, gone.delta_type, None))
    steps.extend(comments)
    for key, value in sorted(desired.properties.items()):
        previous = live.properties.get(key)
        if previous != value:
            steps.append(SetProperty(table, key, value, previous))
    return ReconcilePlan(table, tuple(_ordered(steps)), tuple(notes))


def column_mapping_first(steps: Sequence[Step]) -> SetProperty | None:
    """The step turning column mapping on when a column the same plan adds needs it: it runs first.

    Delta refuses an added name containing ``CHARS_NEEDING_COLUMN_MAPPING`` until column mapping is on,
    so renderers run this property ahead of ``ADD COLUMNS`` and printed plans list it there too. With
    plain names it stays with the other properties: one statement, one table version fewer.
    """
    if not names_needing_column_mapping([s for s in steps if isinstance(s, AddColumn)]):
        return None
    return next(
        (
            s
            for s in steps
            if isinstance(s, SetProperty)
            and s.key == COLUMN_MAPPING_MODE
            and s.value.lower() in COLUMN_MAPPING_MODES
        ),
        None,
    )


def names_needing_column_mapping(steps: Sequence[Step]) -> list[str]:
    """Names the plan would declare (``outer.inner`` for struct fields) that need column mapping."""
    declared = [c for s in steps if isinstance(s, CreateTable) for c in s.columns]
    declared += [s.column for s in steps if isinstance(s, AddColumn)]
    return [
        ".".join(path)
        for column in declared
        for path in _field_paths((column.name,), column.arrow_type)
        if CHARS_NEEDING_COLUMN_MAPPING.intersection(path[-1])
    ]


def column_mapping_after(live: TableState | None, the_plan: ReconcilePlan) -> bool:
    """Whether the table has column mapping once ``the_plan`` ran (its CREATE or a property step, else
    the live table's ``delta.columnMapping.mode``)."""
    mode = live.properties.get(COLUMN_MAPPING_MODE, "none") if live is not None else "none"
    for step in the_plan.steps:
        if isinstance(step, CreateTable):
            mode = step.properties.get(COLUMN_MAPPING_MODE, "none")
            break
        if isinstance(step, SetProperty) and step.key == COLUMN_MAPPING_MODE:
            mode = step.value
            break
    return mode.lower() in COLUMN_MAPPING_MODES


def unsendable_refusals(live: TableState | None, the_plan: ReconcilePlan) -> tuple[Refuse, ...]:
    """Refusals for the columns ``the_plan`` would declare that Zerobus' Arrow path cannot carry.

    The rule a write's schema gate applies before its first batch (``wire_schema``): held by the
    backends' ``plan`` too, so a table made by ``reconcile`` or ``plan --apply`` (a contract asset, the
    reconcile operator) is one a write can send to. Live columns are left to the gate.
    """
    declared = [c for s in the_plan.steps if isinstance(s, CreateTable) for c in s.columns]
    declared += [s.column for s in the_plan.steps if isinstance(s, AddColumn)]
    if not declared:
        return ()
    schema = pa.schema([pa.field(c.name, c.arrow_type, c.nullable) for c in declared])
    mapped = column_mapping_after(live, the_plan)
    return tuple(
        Refuse(the_plan.table, problem.path.split(".", 1)[0], problem.render())
        for problem in arrow_column_problems(schema, column_mapping=mapped)
    )


def _field_paths(path: tuple[str, ...], t: pa.DataType) -> Iterator[tuple[str, ...]]:
    yield path
    yield from _nested_field_paths(path, t)


def _nested_field_paths(path: tuple[str, ...], t: pa.DataType) -> Iterator[tuple[str, ...]]:
    # Storage types only (``arrow_storage_type``): lists, maps and structs can nest struct fields,
    # and Delta checks every nested field name, not just the top-level column.
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            field_ = t.field(i)
            yield from _field_paths((*path, field_.name), field_.type)
    elif pa.types.is_list(t):
        yield from _nested_field_paths(path, t.value_type)
    elif pa.types.is_map(t):
        yield from _nested_field_paths(path, t.key_type)
        yield from _nested_field_paths(path, t.item_type)


def _ordered(steps: list[Step]) -> list[Step]:
    # Refusals first so a printed plan leads with what blocks it; otherwise schema before metadata,
    # except that turning column mapping on precedes the columns that may need it.
    rank = {Refuse: 0, CreateTable: 1, AddColumn: 2, WidenColumn: 3, SetComment: 4, SetProperty: 5}
    first = column_mapping_first(steps)
    return sorted(steps, key=lambda s: 1.5 if s is first else rank[type(s)])


def _storage_or_refuse(table: str, col: DesiredColumn, steps: list[Step]) -> pa.DataType | None:
    try:
        return arrow_storage_type(col.arrow_type)
    except UnsupportedType as exc:
        steps.append(Refuse(table, col.name, str(exc), None, str(col.arrow_type)))
        return None


def _infers_types(desired: DesiredTable) -> bool:
    """A derived table created by a write with no contract: its types come from the first run's data."""
    return desired.subset and desired.role is Role.DERIVED and PROP_CONTRACT_URI not in desired.properties


def _plan_create(desired: DesiredTable) -> ReconcilePlan:
    table = desired.name
    refusals: list[Step] = []
    columns: list[ColumnDef] = []
    roomy = _infers_types(desired)
    for col in desired.columns:
        storage = _storage_or_refuse(table, col, refusals)
        if storage is None:
            continue
        if roomy and not col.engine_owned:
            storage = roomy_decimal(storage)
        comment = managed_comment(col.description) if col.description else None
        columns.append(ColumnDef(col.name, delta_type(storage), storage, col.nullable, comment))
    if refusals:
        return ReconcilePlan(table, tuple(refusals))
    return ReconcilePlan(table, (CreateTable(table, tuple(columns), desired.creation_properties()),))


def _plan_type(
    table: str,
    live: TableState,
    desired: DesiredTable,
    col: DesiredColumn,
    current: LiveColumn,
    storage: pa.DataType,
    allow_widening: bool,
    steps: list[Step],
) -> None:
    if storage == current.arrow_type:
        return
    wanted = delta_type(storage)
    primary_raw = desired.role is Role.PRIMARY_RAW or live.role is Role.PRIMARY_RAW
    if can_widen_to(current.arrow_type, storage):
        if not allow_widening:
            steps.append(
                Refuse(
                    table,
                    col.name,
                    f"type widening was not opted in; {WIDENING_FIX}, or cast the column to the live type",
                    current.delta_type,
                    wanted,
                )
            )
        elif primary_raw and not iceberg_legal_widening(current.arrow_type, storage):
            steps.append(
                Refuse(
                    table,
                    col.name,
                    "widening is not Iceberg-V2-legal on a primary_raw table "
                    "(int->long, float->double, decimal precision only)",
                    current.delta_type,
                    wanted,
                )
            )
        else:
            steps.append(WidenColumn(table, col.name, current.delta_type, wanted, storage))
        return
    if desired.subset:
        # A producer's batch cannot change an existing column. A narrower type is cast by the write
        # guard; any other mismatch (nested into STRING, time zones, ...) is refused there, per batch,
        # with the precise fix (``to_json``, ``assume_timezone``, ...).
        return
    if can_widen_to(storage, current.arrow_type):
        reason = "narrowing a column is not supported; declare the live type"
    else:
        reason = "type conflict: the desired type is neither the live type nor a lossless widening of it"
    steps.append(Refuse(table, col.name, reason, current.delta_type, wanted))


def _plan_nullability(
    table: str, desired: DesiredTable, col: DesiredColumn, current: LiveColumn, steps: list[Step]
) -> None:
    if desired.subset or col.engine_owned or col.nullable == current.nullable:
        return
    if not col.nullable:
        reason = "cannot make an existing nullable column NOT NULL; declare it nullable"
    else:
        reason = (
            "live column is NOT NULL but declared nullable; declare it NOT NULL (relaxing is not planned)"
        )
    steps.append(Refuse(table, col.name, reason, current.delta_type, current.delta_type))


def _plan_comment(
    table: str,
    policy: CommentPolicy,
    col: DesiredColumn,
    current: LiveColumn,
    steps: list[Step],
    notes: list[str],
) -> None:
    if not col.description:
        return
    wanted = managed_comment(col.description)
    status = comment_status(current.comment, col.description)
    if status is CommentStatus.CURRENT:
        return
    if status in (CommentStatus.HUMAN_EDITED, CommentStatus.UNMANAGED) and policy is CommentPolicy.RESPECT:
        notes.append(
            f"{table}.{col.name}: comment was edited outside the catalog ({status.value}); kept under "
            f"comment policy 'respect' (use 'restore' to write the contract's description back)"
        )
        return
    steps.append(SetComment(table, col.name, wanted, current.comment))
