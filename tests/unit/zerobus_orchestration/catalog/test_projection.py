"""``CatalogGate.projected``: the target ``ensure`` would return, planned and not applied, on both backends.

The whole-input check of a write conforms every batch to this target before the table is touched, so it
must be exactly what ``ensure`` then returns: for a table it creates, evolves (an added column, a widened
one) or finds as is, and for a second batch schema of the same input planned against the first one's
projection. And a projection changes nothing: no table, no version.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.uc_fixtures import Backend
from tests.unit.zerobus_orchestration.catalog.test_backend_contract import RICH_SCHEMA
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import PlanRefusedError, WriteBoundaryError

TABLE = "main.derived.projected"
SENDABLE = RICH_SCHEMA
# A struct field ``odd`name`` is a name the Arrow Flight path takes only on a table with column mapping
# (docs/architecture.md#the-wire-contract): the same schema with it, for the refusal below.
ODD_POINT = pa.struct([("x", pa.float64()), ("odd`name", pa.string())])
ODD_NAMED = RICH_SCHEMA.set(RICH_SCHEMA.get_field_index("point"), pa.field("point", ODD_POINT))


def _gate(backend: Backend, role: Role = Role.DERIVED, allow_widening: bool = False) -> CatalogGate:
    return CatalogGate(backend.catalog, role, allow_widening=allow_widening)


def test_a_table_to_create_projects_the_target_ensure_returns(backend: Backend) -> None:
    gate = _gate(backend)
    target = gate.projected(TABLE, SENDABLE).arrow_schema()
    assert backend.catalog.describe(TABLE) is None  # nothing was created
    assert target == gate.ensure(TABLE, SENDABLE)


def test_primary_raw_creation_projects_the_same_target(backend: Backend) -> None:
    gate = _gate(backend, Role.PRIMARY_RAW)
    table = "main.raw.projected"
    target = gate.projected(table, SENDABLE).arrow_schema()
    assert backend.catalog.describe(table) is None
    assert target == gate.ensure(table, SENDABLE)


@pytest.mark.parametrize("role", [Role.DERIVED, Role.PRIMARY_RAW])
def test_a_name_the_wire_refuses_is_refused_by_the_projection_as_by_ensure(
    backend: Backend, role: Role
) -> None:
    gate = _gate(backend, role)
    table = "main.raw.projected" if role is Role.PRIMARY_RAW else TABLE
    column_mapped = backend.kind == "unity" and role is Role.PRIMARY_RAW  # Unity maps a primary raw table
    if column_mapped:
        assert gate.projected(table, ODD_NAMED).arrow_schema() == gate.ensure(table, ODD_NAMED)
        return
    for attempt in (gate.projected, gate.ensure):
        with pytest.raises(WriteBoundaryError, match=r"column 'point\.odd`name' is a field name outside"):
            attempt(table, ODD_NAMED)
    assert backend.catalog.describe(table) is None


def test_an_added_and_a_widened_column_project_the_evolved_target(backend: Backend) -> None:
    gate = _gate(backend, allow_widening=True)
    first = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
    gate.ensure(TABLE, first)
    before = backend.catalog.describe(TABLE)
    assert before is not None
    evolved = pa.schema([*first.remove(1), pa.field("n", pa.int64()), pa.field("note", pa.string())])
    target = gate.projected(TABLE, evolved).arrow_schema()
    after = backend.catalog.describe(TABLE)
    assert after is not None and after.version == before.version  # nothing applied
    assert target == gate.ensure(TABLE, evolved)


def test_a_second_schema_is_planned_against_the_first_ones_projection(backend: Backend) -> None:
    gate = _gate(backend)
    first = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("day", pa.date32())])
    second = pa.schema([*first, pa.field("label", pa.string())])
    state = gate.projected(TABLE, first)
    projected_second = gate.projected(TABLE, second, after=state).arrow_schema()
    assert backend.catalog.describe(TABLE) is None
    gate.ensure(TABLE, first)
    assert projected_second == gate.ensure(TABLE, second)


def test_a_second_schema_the_first_ones_table_refuses_is_refused_by_the_projection(backend: Backend) -> None:
    gate = _gate(backend)  # no widening opted in: int32 then int64 is refused at the second file
    first = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
    second = pa.schema([first.field("id"), pa.field("n", pa.int64())])
    state = gate.projected(TABLE, first)
    with pytest.raises(PlanRefusedError, match="widening"):
        gate.projected(TABLE, second, after=state)
    assert backend.catalog.describe(TABLE) is None


def test_a_projection_reads_the_live_table_once(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate checks the live table and plans against that same read: on Unity each read of the table
    is a REST call and two SQL statements on the warehouse, paid before a write sends its first row."""
    gate = _gate(backend)
    gate.ensure(TABLE, SENDABLE.remove(SENDABLE.get_field_index("point")))
    reads: list[str] = []
    describe = backend.catalog.describe
    monkeypatch.setattr(backend.catalog, "describe", lambda table: reads.append(table) or describe(table))
    target = gate.projected(TABLE, SENDABLE).arrow_schema()  # an added column: a plan with a step
    assert reads == [TABLE]
    monkeypatch.undo()
    assert target == gate.ensure(TABLE, SENDABLE)
