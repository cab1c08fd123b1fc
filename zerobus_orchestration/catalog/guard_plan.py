"""The write-boundary guard's per-schema plan: what the schemas alone decide, worked out once per schema.

A write's batches share a schema, so ``guard.conform_batch`` looks up here which declared columns a
batch of that schema carries, which of them need the full per-value decision and which wire type each is
sent as; only the per-value checks are paid per batch. The plan never refuses: the guard passes in the
wire-type lookup (which refuses a declared shape the wire cannot carry) and keeps every refusal, its
counts and its log in ``guard.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from zerobus_orchestration.catalog.temporal_range import holds_temporal
from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.type_map import arrow_storage_type


@dataclass(frozen=True)
class Plan:
    """What the schemas alone decide for one (table, batch schema, target, trusted) combination.

    ``columns``: per declared column present in the batch, its index in the batch, whether it needs
    the full per-value decision (``guard._Column.decide``; the others have the declared type already and
    need only the NOT NULL count check, O(1): Arrow keeps the null count) and its wire type when that
    differs from the declared one (None: sent as declared). ``schema``: the output (wire) schema.
    ``unchanged``: the output schema is the batch's own, so a batch needing no cast is returned as is.
    """

    columns: tuple[tuple[int, pa.Field, bool, pa.DataType | None], ...]
    schema: pa.Schema
    unchanged: bool


_PLAN_CACHE_SIZE = 16
_plans: list[tuple[str, pa.Schema, pa.Schema, frozenset[str], Plan]] = []
_plans_lock = threading.Lock()


def cached_plan(table: str, incoming: pa.Schema, target: pa.Schema, trusted: frozenset[str]) -> Plan | None:
    """The plan made before for these schemas, or None. Looked up by ``Schema.equals`` (cheap), not by
    hash (it is not); the most recently used plans stay at the front."""
    with _plans_lock:
        for i, (t, s, g, tr, plan) in enumerate(_plans):
            if (
                t == table
                and tr == trusted
                and s.equals(incoming, check_metadata=True)
                and g.equals(target, check_metadata=True)
            ):
                if i:
                    _plans.insert(0, _plans.pop(i))
                return plan
    return None


def remember(table: str, incoming: pa.Schema, target: pa.Schema, trusted: frozenset[str], plan: Plan) -> None:
    """Keep ``plan`` for the next batch of these schemas (at most ``_PLAN_CACHE_SIZE`` plans)."""
    with _plans_lock:
        _plans.insert(0, (table, incoming, target, trusted, plan))
        del _plans[_PLAN_CACHE_SIZE:]


def make_plan(
    incoming: pa.Schema,
    target: pa.Schema,
    trusted: frozenset[str],
    wire_type: Callable[[pa.Field], pa.DataType],
) -> Plan | None:
    """The plan for a batch of ``incoming`` into ``target``, or None when a NOT NULL column is missing
    (the guard's slow path then builds the full refusal). ``wire_type``: the declared column's wire type,
    called for each declared column present in the batch, in the target's order."""
    columns: list[tuple[int, pa.Field, bool, pa.DataType | None]] = []
    fields: list[pa.Field] = []
    for declared in target:
        index = incoming.get_field_index(declared.name)
        if index < 0:
            if not declared.nullable:
                return None
            continue
        wire = wire_type(declared)
        sent = incoming.field(index).type
        # Already the declared type, or already its wire form (a large string for a STRING column, the
        # engine's own ``_twg_source``): nothing to cast, and none of the per-value casts' checks apply.
        same = sent == declared.type or _is_wire_form_of(sent, wire, declared.type)
        # Engine-stamped columns of the declared type are right by construction (an emit time comes
        # from a Python datetime, so it cannot leave 0001..9999): no per-value range scan for them. A
        # caller's column holding a DATE/TIMESTAMP at any depth is scanned even when already declared.
        full = not same or (holds_temporal(declared.type) and declared.name not in trusted)
        converted = None if str(wire) == str(declared.type) else wire  # str: names count on the wire
        columns.append((index, declared, full, converted))
        fields.append(pa.field(declared.name, wire, nullable=declared.nullable))
    schema = pa.schema(fields, metadata=incoming.metadata)
    # Arrow's schema equality ignores list item and map field names; the wire does not.
    unchanged = schema.equals(incoming, check_metadata=True) and str(schema) == str(incoming)
    return Plan(tuple(columns), schema, unchanged)


def _is_wire_form_of(sent: pa.DataType, wire: pa.DataType, declared: pa.DataType) -> bool:
    """``sent`` is ``declared``'s wire type and a lossless encoding of it (large strings for STRING), not
    text in a DECIMAL column's wire type (text is parsed nowhere: refused as a type mismatch)."""
    if str(sent) != str(wire):
        return False
    try:
        return bool(arrow_storage_type(sent) == declared)
    except UnsupportedType:
        return False
