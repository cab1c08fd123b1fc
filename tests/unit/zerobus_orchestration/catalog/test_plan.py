"""The pure planner: plan matrix over in-memory ``TableState`` values (no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pyarrow as pa
import pytest
from hypothesis import given, settings

from tests.support.catalog_strategies import SCHEMAS
from zerobus_orchestration.catalog.base import DesiredTable, LiveColumn, ProtocolInfo, TableState, TableTags
from zerobus_orchestration.catalog.plan import (
    AddColumn,
    CreateTable,
    ReconcilePlan,
    Refuse,
    SetComment,
    SetProperty,
    WidenColumn,
    names_needing_column_mapping,
    plan,
)
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import managed_comment
from zerobus_orchestration.errors import ConfigError, PlanRefusedError
from zerobus_orchestration.reserved import RESERVED_DESCRIPTIONS, RESERVED_FIELDS, RESERVED_NAMES
from zerobus_orchestration.type_map import arrow_storage_type, delta_type

T = "main.raw.events"


def desired(schema: pa.Schema, role: Role = Role.DERIVED, **kw: object) -> DesiredTable:
    return DesiredTable.build(T, schema, role, **kw)  # type: ignore[arg-type]


def live_from(
    d: DesiredTable, *, drop: tuple[str, ...] = (), override: Mapping[str, LiveColumn] = ()
) -> TableState:
    """The live state exactly matching ``d`` (what a fresh create yields), then edited."""
    overrides = dict(override)
    cols = []
    for c in d.columns:
        if c.name in drop:
            continue
        storage = arrow_storage_type(c.arrow_type)
        col = LiveColumn(
            c.name,
            delta_type(storage),
            storage,
            c.nullable,
            managed_comment(c.description) if c.description else None,
        )
        cols.append(overrides.pop(c.name, col))
    cols.extend(overrides.values())
    return TableState(
        name=T,
        columns=tuple(cols),
        properties=dict(d.properties),
        protocol=ProtocolInfo(1, 2),
        table_id="id-1",
        location="/wh/main/raw/events",
        version=0,
        registered=True,
        role=d.role,
    )


def col(name: str, t: pa.DataType, nullable: bool = True, comment: str | None = None) -> LiveColumn:
    return LiveColumn(name, delta_type(t), arrow_storage_type(t), nullable, comment)


BASE = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.int32()), ("name", pa.string())]
)


def test_reserved_columns_are_always_desired_with_builtin_descriptions() -> None:
    d = desired(BASE)
    assert [c.name for c in d.columns] == ["id", "amount", "name", *RESERVED_NAMES]
    for rf in RESERVED_FIELDS:
        c = d.column(rf.name)
        assert c is not None and c.engine_owned and c.arrow_type == rf.type
        assert c.description == RESERVED_DESCRIPTIONS[rf.name]


def test_reserved_column_with_wrong_type_is_refused_at_build() -> None:
    with pytest.raises(ConfigError, match="_twg_offset"):
        desired(BASE.append(pa.field("_twg_offset", pa.string())))


def test_create_when_absent_carries_columns_comments_and_properties() -> None:
    d = desired(BASE, descriptions={"id": "primary key"}, tags=TableTags(owner="team-a", source="orders"))
    p = plan(None, d)
    assert len(p.steps) == 1 and isinstance(p.steps[0], CreateTable)
    create = p.steps[0]
    by_name = {c.name: c for c in create.columns}
    assert by_name["id"].delta_type == "BIGINT" and not by_name["id"].nullable
    assert by_name["id"].comment == managed_comment("primary key")
    assert by_name["name"].comment is None  # no authority, no payload comment
    assert by_name["_twg_offset"].comment == managed_comment(RESERVED_DESCRIPTIONS["_twg_offset"])
    assert create.properties["twg.owner"] == "team-a"
    assert create.properties["twg.role"] == "derived"


def test_noop_is_an_empty_plan() -> None:
    d = desired(BASE, descriptions={"id": "primary key"})
    p = plan(live_from(d), d)
    assert p.empty and p.steps == () and str(p) == f"{T}: up to date"


def test_additive_nullable_column_is_planned_with_its_comment() -> None:
    d = desired(BASE.append(pa.field("extra", pa.uint8())), descriptions={"extra": "new"})
    p = plan(live_from(d, drop=("extra",)), d)
    assert [type(s) for s in p.steps] == [AddColumn]
    step = p.steps[0]
    assert isinstance(step, AddColumn)
    assert step.column.delta_type == "SMALLINT" and step.column.comment == managed_comment("new")


def test_new_not_null_column_is_refused() -> None:
    d = desired(BASE.append(pa.field("must", pa.int32(), nullable=False)))
    p = plan(live_from(d, drop=("must",)), d)
    assert [type(s) for s in p.steps] == [Refuse]
    with pytest.raises(PlanRefusedError) as info:
        p.raise_if_refused()
    assert T in str(info.value) and "must" in str(info.value) and "NOT NULL" in str(info.value)


def test_widening_only_when_opted_in() -> None:
    d = desired(BASE.set(1, pa.field("amount", pa.int64())))
    live = live_from(d, override={"amount": col("amount", pa.int32())})
    refused = plan(live, d)
    assert [type(s) for s in refused.steps] == [Refuse]
    assert "allow_widening" in refused.steps[0].describe()
    widened = plan(live, d, allow_widening=True)
    assert [type(s) for s in widened.steps] == [WidenColumn]
    step = widened.steps[0]
    assert isinstance(step, WidenColumn) and (step.from_type, step.to_type) == ("INT", "BIGINT")


@pytest.mark.parametrize(
    ("live_t", "desired_t"),
    [(pa.int32(), pa.float64()), (pa.int64(), pa.float64()), (pa.int32(), pa.string())],
    ids=["int->double", "bigint->double", "int->string"],
)
def test_lossy_widening_is_refused_even_when_opted_in(live_t: pa.DataType, desired_t: pa.DataType) -> None:
    d = desired(BASE.set(1, pa.field("amount", desired_t)))
    p = plan(live_from(d, override={"amount": col("amount", live_t)}), d, allow_widening=True)
    assert [type(s) for s in p.steps] == [Refuse]
    refusal = p.refusals[0]
    assert refusal.column == "amount"
    assert refusal.live_type == delta_type(live_t) and refusal.desired_type == delta_type(desired_t)


def test_primary_raw_plans_iceberg_legal_widening() -> None:
    # Every lossless widening between canonical Delta types is also Iceberg-V2-legal.
    d = desired(BASE.set(1, pa.field("amount", pa.decimal128(12, 2))), role=Role.PRIMARY_RAW)
    ok = plan(live_from(d, override={"amount": col("amount", pa.decimal128(10, 2))}), d, allow_widening=True)
    assert [type(s) for s in ok.steps] == [WidenColumn]
    d2 = desired(BASE.set(1, pa.field("amount", pa.float64())), role=Role.PRIMARY_RAW)
    floats = plan(live_from(d2, override={"amount": col("amount", pa.float32())}), d2, allow_widening=True)
    assert [type(s) for s in floats.steps] == [WidenColumn]


def test_narrowing_is_refused_for_a_declared_schema_but_fits_a_producer_subset() -> None:
    d = desired(BASE)  # amount INT
    live = live_from(d, override={"amount": col("amount", pa.int64())})
    p = plan(live, d)
    assert [type(s) for s in p.steps] == [Refuse]
    assert "narrowing" in p.refusals[0].reason
    producer = desired(BASE, subset=True)
    assert plan(live, producer).empty  # int32 into BIGINT: the write guard casts


def test_dropped_or_renamed_column_is_refused_by_name() -> None:
    d = desired(BASE.remove(2).append(pa.field("full_name", pa.string())))
    live = live_from(desired(BASE))
    p = plan(live, d)
    kinds = sorted(type(s).__name__ for s in p.steps)
    assert kinds == ["AddColumn", "Refuse"]
    assert p.refusals[0].column == "name" and "renaming" in p.refusals[0].reason
    assert p.steps[0] is p.refusals[0]  # refusals lead the printed plan


def test_producer_may_omit_nullable_columns_but_not_not_null_ones() -> None:
    live = live_from(desired(BASE))
    assert plan(live, desired(BASE.remove(2), subset=True)).empty
    p = plan(live, desired(BASE.remove(0), subset=True))
    assert [r.column for r in p.refusals] == ["id"]


def test_unsupported_type_becomes_a_refusal_naming_the_cast() -> None:
    p = plan(None, desired(BASE.append(pa.field("u", pa.uint64()))))
    assert [r.column for r in p.refusals] == ["u"]
    assert "decimal128(20, 0)" in p.refusals[0].reason


def test_comment_hash_unchanged_is_noop_and_changed_description_is_rewritten() -> None:
    d = desired(BASE, descriptions={"amount": "in cents"})
    live = live_from(d)
    assert plan(live, d).empty
    d2 = desired(BASE, descriptions={"amount": "in euros"})
    p = plan(live, d2)
    assert [type(s) for s in p.steps] == [SetComment]
    step = p.steps[0]
    assert isinstance(step, SetComment)
    assert step.comment == managed_comment("in euros") and step.previous == managed_comment("in cents")


@pytest.mark.parametrize(
    "edited",
    [managed_comment("in cents").replace("cents", "dollars"), "a human wrote this"],
    ids=["edited-managed", "unmanaged"],
)
def test_human_edit_is_respected_and_reported_or_restored(edited: str) -> None:
    d = desired(BASE, descriptions={"amount": "in cents"})
    live = live_from(d, override={"amount": col("amount", pa.int32(), comment=edited)})
    kept = plan(live, d)
    assert kept.empty and len(kept.notes) == 1 and "amount" in kept.notes[0]
    restore = desired(BASE, descriptions={"amount": "in cents"}, comment_policy=CommentPolicy.RESTORE)
    restored = plan(live, restore)
    assert [type(s) for s in restored.steps] == [SetComment]


def test_no_description_leaves_live_comment_alone() -> None:
    d = desired(BASE)
    live = live_from(d, override={"name": col("name", pa.string(), comment="someone's note")})
    assert plan(live, d).empty


def test_changed_property_is_set_and_unknown_live_properties_are_kept() -> None:
    d = desired(BASE, tags=TableTags(owner="team-b"))
    live = live_from(desired(BASE, tags=TableTags(owner="team-a")))
    live = TableState(**{**live.__dict__, "properties": {**live.properties, "other": "x"}})
    p = plan(live, d)
    assert p.steps == (SetProperty(T, "twg.owner", "team-b", "team-a"),)


def test_nullability_changes_are_refused_for_declared_schemas() -> None:
    d = desired(BASE.set(1, pa.field("amount", pa.int32(), nullable=False)))
    p = plan(live_from(desired(BASE)), d)
    assert [r.column for r in p.refusals] == ["amount"]


def test_plan_prints_for_humans_and_serialises_as_json() -> None:
    d = desired(BASE.append(pa.field("extra", pa.string())), descriptions={"amount": "x"})
    live = live_from(desired(BASE), drop=())
    p = plan(live, d)
    text = str(p)
    assert "add column extra STRING" in text and "set comment of main.raw.events.amount" in text
    data = json.loads(p.to_json())
    assert [s["kind"] for s in data["steps"]] == ["add_column", "set_comment"]
    assert data["steps"][0]["column"] == {
        "name": "extra",
        "type": "STRING",
        "nullable": True,
        "comment": None,
    }
    assert isinstance(p, ReconcilePlan) and not p.empty


@settings(max_examples=150, deadline=None)
@given(SCHEMAS)
def test_planning_against_the_created_table_is_a_noop(schema: pa.Schema) -> None:
    d = desired(schema, descriptions={schema.names[0]: "first"})
    create = plan(None, d).steps[0]
    assert isinstance(create, CreateTable)
    live = TableState(
        T,
        tuple(LiveColumn(c.name, c.delta_type, c.arrow_type, c.nullable, c.comment) for c in create.columns),
        dict(create.properties),
        ProtocolInfo(1, 2),
        "tid",
        None,
        0,
        True,
    )
    assert plan(live, d).empty
    assert plan(live, desired(schema, subset=True)).empty


def test_column_differing_from_a_live_one_only_in_case_is_refused_naming_both() -> None:
    # Delta/UC column names are case-insensitive: ADD COLUMNS "ID" beside live "id" would collide.
    live = live_from(desired(BASE))
    d = desired(pa.schema([pa.field("ID", pa.int64(), nullable=False), ("amount", pa.int32())]), subset=True)
    p = plan(live, d)
    assert [type(s) for s in p.steps] == [Refuse]
    with pytest.raises(
        PlanRefusedError, match=r"main\.raw\.events\.ID: live column 'id' differs only in case"
    ):
        p.raise_if_refused()


def test_schema_with_columns_differing_only_in_case_is_refused_at_build() -> None:
    with pytest.raises(ConfigError, match=r"main\.raw\.events: columns 'id' and 'ID' differ only in case"):
        desired(pa.schema([("id", pa.int64()), ("ID", pa.int64())]))


@pytest.mark.parametrize("column", ["_TWG_OFFSET", "_Twg_Emit_Ts", "_twg_SOURCE"])
def test_payload_column_shadowing_an_engine_column_in_another_case_is_refused_at_build(column: str) -> None:
    # Delta and UC would see it as the engine-owned column: a duplicate at create, not a payload column.
    with pytest.raises(ConfigError) as info:
        desired(pa.schema([("id", pa.int64()), (column, pa.int64())]))
    message = str(info.value)
    assert f"table {T}: column {column!r}" in message
    assert f"engine-owned column {column.lower()!r}" in message
    assert f"rename the payload column, e.g. {column.lstrip('_')!r}" in message


def test_live_column_shadowing_an_engine_column_is_refused_with_a_rename_of_the_live_one() -> None:
    # A table made outside the catalog with "_TWG_OFFSET": the engine column cannot be respelled.
    d = desired(BASE)
    live = live_from(
        d,
        drop=("_twg_offset",),
        override={"_TWG_OFFSET": LiveColumn("_TWG_OFFSET", "BIGINT", pa.int64(), True, None)},
    )
    p = plan(live, d)
    assert [(type(s), s.column) for s in p.steps if isinstance(s, Refuse)] == [(Refuse, "_twg_offset")]
    with pytest.raises(PlanRefusedError, match=r"rename the live column '_TWG_OFFSET'"):
        p.raise_if_refused()


def test_negative_decimal_scale_is_refused_naming_the_column_and_the_cast() -> None:
    p = plan(None, desired(pa.schema([("id", pa.int64()), ("price", pa.decimal128(5, -2))])))
    assert [(type(s), s.column) for s in p.steps if isinstance(s, Refuse)] == [(Refuse, "price")]
    with pytest.raises(PlanRefusedError, match=r"events\.price: .*cast it to decimal128\(7, 0\)"):
        p.raise_if_refused()


def test_names_needing_column_mapping_include_nested_fields_and_only_declared_ones() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("order id", pa.string()),
            ("lines", pa.list_(pa.struct([("unit price", pa.float64()), ("sku", pa.string())]))),
            ("attrs", pa.map_(pa.string(), pa.struct([("a=b", pa.int32())]))),
            ("dotted.ok", pa.string()),
        ]
    )
    created = plan(None, desired(schema))
    assert names_needing_column_mapping(created.steps) == ["order id", "lines.unit price", "attrs.a=b"]
    # On a live table only what the plan adds counts: the rest is already there.
    live = live_from(desired(schema), drop=("order id",))
    assert names_needing_column_mapping(plan(live, desired(schema)).steps) == ["order id"]
