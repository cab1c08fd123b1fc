"""The table a reconcile plan would leave, computed without running it.

A write checks its whole input before the first row is sent (``sink/input_check.py``), against the
target the catalog gate would hand the write-boundary guard: the live table's columns, or, for a table
that does not exist yet or that the input would evolve, the columns the plan would create, add or
widen. ``projected`` applies a plan's steps to a ``TableState`` in memory, so that target is known
while nothing is created or changed. Only what the guard's target depends on is projected (columns,
their types and nullability); properties follow the plan too, so a second schema of the same input can
be planned against the first one's projection.
"""

from __future__ import annotations

import dataclasses

from zerobus_orchestration.catalog.base import PROP_ROLE, LiveColumn, ProtocolInfo, TableState
from zerobus_orchestration.catalog.steps import (
    AddColumn,
    ColumnDef,
    CreateTable,
    ReconcilePlan,
    SetComment,
    SetProperty,
    WidenColumn,
)
from zerobus_orchestration.config import Role


def projected(live: TableState | None, plan: ReconcilePlan) -> TableState:
    """``live`` (None: absent) as ``plan`` would leave it. The plan must not refuse (checked by the
    caller with ``raise_if_refused``); a plan with neither a table nor a ``CreateTable`` is a bug."""
    state = live
    for step in plan.steps:
        if isinstance(step, CreateTable):
            state = TableState(
                name=plan.table,
                columns=tuple(_live(c) for c in step.columns),
                properties=dict(step.properties),
                protocol=ProtocolInfo(1, 2),
                table_id=None,
                location=None,
                version=None,
                registered=False,
                role=_role(step.properties.get(PROP_ROLE)),
            )
            continue
        if state is None:
            raise ValueError(f"{plan.table}: a plan for an absent table must create it first ({plan})")
        if isinstance(step, AddColumn):
            state = dataclasses.replace(state, columns=(*state.columns, _live(step.column)))
        elif isinstance(step, WidenColumn):
            state = dataclasses.replace(
                state,
                columns=tuple(
                    dataclasses.replace(c, delta_type=step.to_type, arrow_type=step.arrow_type)
                    if c.name == step.column
                    else c
                    for c in state.columns
                ),
            )
        elif isinstance(step, SetProperty):
            state = dataclasses.replace(state, properties={**state.properties, step.key: step.value})
        elif isinstance(step, SetComment):
            state = dataclasses.replace(
                state,
                columns=tuple(
                    dataclasses.replace(c, comment=step.comment) if c.name == step.column else c
                    for c in state.columns
                ),
            )
    if state is None:
        raise ValueError(f"{plan.table}: the plan neither finds nor creates the table ({plan})")
    return state


def _live(column: ColumnDef) -> LiveColumn:
    return LiveColumn(column.name, column.delta_type, column.arrow_type, column.nullable, column.comment)


def _role(value: str | None) -> Role | None:
    try:
        return None if value is None else Role(value)
    except ValueError:
        return None
