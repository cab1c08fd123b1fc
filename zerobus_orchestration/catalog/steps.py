"""The reconcile plan's vocabulary: the steps a backend runs, and the plan that holds them.

``CreateTable``, ``AddColumn``, ``WidenColumn``, ``SetComment``, ``SetProperty`` and ``Refuse`` are
values with a ``kind``, a ``describe()`` line and a JSON form; ``ReconcilePlan`` raises every refusal at
once (``PlanRefusedError``). How a plan is computed is ``catalog/plan.py``; how it is rendered as SQL is
``catalog/ddl.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from zerobus_orchestration.errors import PlanRefusedError


@dataclass(frozen=True)
class ColumnDef:
    """A column as the catalog will declare it (storage type, Delta type text, managed comment)."""

    name: str
    delta_type: str
    arrow_type: pa.DataType
    nullable: bool
    comment: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.delta_type,
            "nullable": self.nullable,
            "comment": self.comment,
        }


@dataclass(frozen=True)
class CreateTable:
    table: str
    columns: tuple[ColumnDef, ...]
    properties: Mapping[str, str]
    kind: str = field(default="create_table", init=False)

    def describe(self) -> str:
        return f"create table {self.table} ({', '.join(f'{c.name} {c.delta_type}' for c in self.columns)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "columns": [c.to_dict() for c in self.columns],
            "properties": dict(self.properties),
        }


@dataclass(frozen=True)
class AddColumn:
    table: str
    column: ColumnDef
    kind: str = field(default="add_column", init=False)

    def describe(self) -> str:
        return f"add column {self.column.name} {self.column.delta_type} to {self.table}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "table": self.table, "column": self.column.to_dict()}


@dataclass(frozen=True)
class WidenColumn:
    table: str
    column: str
    from_type: str
    to_type: str
    arrow_type: pa.DataType
    kind: str = field(default="widen_column", init=False)

    def describe(self) -> str:
        return f"widen {self.table}.{self.column} from {self.from_type} to {self.to_type}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "column": self.column,
            "from": self.from_type,
            "to": self.to_type,
        }


@dataclass(frozen=True)
class SetComment:
    table: str
    column: str
    comment: str
    previous: str | None
    kind: str = field(default="set_comment", init=False)

    def describe(self) -> str:
        return f"set comment of {self.table}.{self.column} to {self.comment!r}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "column": self.column,
            "comment": self.comment,
            "previous": self.previous,
        }


@dataclass(frozen=True)
class SetProperty:
    table: str
    key: str
    value: str
    previous: str | None
    kind: str = field(default="set_property", init=False)

    def describe(self) -> str:
        return f"set property {self.key}={self.value!r} on {self.table} (was {self.previous!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "key": self.key,
            "value": self.value,
            "previous": self.previous,
        }


@dataclass(frozen=True)
class Refuse:
    table: str
    column: str | None
    reason: str
    live_type: str | None = None
    desired_type: str | None = None
    kind: str = field(default="refuse", init=False)

    def describe(self) -> str:
        where = f"{self.table}.{self.column}" if self.column is not None else self.table
        types = ""
        if self.live_type is not None or self.desired_type is not None:
            types = f" (live {self.live_type or '-'}, desired {self.desired_type or '-'})"
        return f"refuse {where}: {self.reason}{types}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "column": self.column,
            "reason": self.reason,
            "live_type": self.live_type,
            "desired_type": self.desired_type,
        }


Step = CreateTable | AddColumn | WidenColumn | SetComment | SetProperty | Refuse


@dataclass(frozen=True)
class ReconcilePlan:
    table: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()  # reported, not executed (e.g. human-edited comments kept)

    @property
    def empty(self) -> bool:
        return not self.steps

    @property
    def refusals(self) -> tuple[Refuse, ...]:
        return tuple(s for s in self.steps if isinstance(s, Refuse))

    @property
    def creates(self) -> bool:
        return any(isinstance(s, CreateTable) for s in self.steps)

    def raise_if_refused(self) -> None:
        refusals = self.refusals
        if refusals:
            reasons = [r.describe() for r in refusals]
            raise PlanRefusedError(
                f"reconcile of {self.table} refused ({len(reasons)} problem(s)):\n  " + "\n  ".join(reasons),
                reasons,
                table=self.table,
                columns=[r.column for r in refusals if r.column is not None],
            )

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "steps": [s.to_dict() for s in self.steps], "notes": list(self.notes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def __str__(self) -> str:
        if self.empty:
            head = f"{self.table}: up to date"
        else:
            head = f"{self.table}: {len(self.steps)} step(s)\n" + "\n".join(
                f"  - {s.describe()}" for s in self.steps
            )
        return head + "".join(f"\n  note: {n}" for n in self.notes)
