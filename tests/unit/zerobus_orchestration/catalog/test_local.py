"""Local backend against real deltalake and SQLite."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field
from hypothesis import HealthCheck, assume, given, settings

from tests.support.catalog_strategies import SCHEMAS, SENDABLE_SCHEMAS
from zerobus_orchestration.catalog.base import Access, DesiredTable, TableCatalog, TableTags
from zerobus_orchestration.catalog.delta_schema_ops import naive_timestamp_in_map
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import managed_comment
from zerobus_orchestration.errors import CatalogError, ConfigError, PlanRefusedError
from zerobus_orchestration.reserved import RESERVED_NAMES
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.type_map import arrow_storage_type

T = "main.raw.events"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.uint16()),
        pa.field("tags", pa.list_(pa.large_string())),
        pa.field("attrs", pa.map_(pa.string(), pa.float64())),
        pa.field("at", pa.timestamp("ns", tz="UTC")),
    ]
)


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    return LocalCatalog(tmp_path / "wh")


def build(schema: pa.Schema = SCHEMA, role: Role = Role.PRIMARY_RAW, **kw: object) -> DesiredTable:
    return DesiredTable.build(T, schema, role, **kw)  # type: ignore[arg-type]


def test_is_a_table_catalog(catalog: LocalCatalog) -> None:
    assert isinstance(catalog, TableCatalog)
    assert catalog.describe(T) is None


def test_create_then_reconcile_twice_creates_no_new_version(catalog: LocalCatalog, tmp_path: Path) -> None:
    d = build(
        descriptions={"id": "primary key"}, tags=TableTags(owner="team-a", contract_uri="file:///c.yaml")
    )
    first = catalog.reconcile(T, d)
    assert first.applied and first.plan.creates and first.version_before is None
    state = first.state
    assert state.location == table_uri(str(tmp_path / "wh"), T)
    assert [c.name for c in state.columns] == ["id", "amount", "tags", "attrs", "at", *RESERVED_NAMES]
    types = {c.name: c.delta_type for c in state.columns}
    assert types == {
        "id": "BIGINT",
        "amount": "INT",
        "tags": "ARRAY<STRING>",
        "attrs": "MAP<STRING, DOUBLE>",
        "at": "TIMESTAMP",
        "_twg_emit_ts": "TIMESTAMP",
        "_twg_source": "STRING",
        "_twg_offset": "BIGINT",
    }
    assert state.column("id") is not None and state.column("id").comment == managed_comment("primary key")  # type: ignore[union-attr]
    assert state.properties["twg.owner"] == "team-a" and state.properties["twg.role"] == "primary_raw"
    version = DeltaTable(state.location).version()

    second = catalog.reconcile(T, d)
    assert second.plan.empty and not second.applied
    third = catalog.reconcile(T, d)
    assert third.plan.empty
    assert DeltaTable(state.location).version() == version == third.state.version


def test_primary_raw_is_created_with_inert_uniform_properties_and_emulated_capabilities(
    catalog: LocalCatalog,
) -> None:
    state = catalog.reconcile(T, build()).state
    assert state.properties["delta.enableIcebergCompatV2"] == "true"
    assert state.properties["delta.universalFormat.enabledFormats"] == "iceberg"
    assert state.properties["delta.enableDeletionVectors"] == "false"
    assert "delta.columnMapping.mode" not in state.properties  # real column mapping would block evolution
    assert state.emulated == {"columnMapping", "uniform"}
    assert state.registered and state.role is Role.PRIMARY_RAW
    assert "icebergCompatV2" not in state.protocol.features


def test_derived_table_gets_no_uniform_properties(catalog: LocalCatalog) -> None:
    state = catalog.reconcile(T, build(role=Role.DERIVED)).state
    assert "delta.enableIcebergCompatV2" not in state.properties
    assert state.emulated == frozenset() and state.role is Role.DERIVED


def test_additive_evolution_and_comment_resync(catalog: LocalCatalog) -> None:
    catalog.reconcile(T, build(descriptions={"amount": "in cents"}))
    v0 = catalog.describe(T).version  # type: ignore[union-attr]
    wider = SCHEMA.append(pa.field("note", pa.string()))
    out = catalog.reconcile(T, build(wider, descriptions={"amount": "in euros", "note": "free text"}))
    assert [s.kind for s in out.plan.steps] == ["add_column", "set_comment"]
    assert out.state.column("note").comment == managed_comment("free text")  # type: ignore[union-attr]
    assert out.state.column("amount").comment == managed_comment("in euros")  # type: ignore[union-attr]
    v1 = out.state.version
    assert v1 is not None and v0 is not None and v1 > v0
    again = catalog.reconcile(T, build(wider, descriptions={"amount": "in euros", "note": "free text"}))
    assert again.plan.empty and again.state.version == v1


def test_human_edit_is_kept_and_reported_then_restored(catalog: LocalCatalog) -> None:
    state = catalog.reconcile(T, build(descriptions={"amount": "in cents"})).state
    DeltaTable(state.location).alter.set_column_metadata("amount", {"comment": "edited by a human"})
    edited_version = catalog.describe(T).version  # type: ignore[union-attr]
    kept = catalog.reconcile(T, build(descriptions={"amount": "in cents"}))
    assert kept.plan.empty and kept.notes and "amount" in kept.notes[0]
    assert kept.state.version == edited_version
    assert kept.state.column("amount").comment == "edited by a human"  # type: ignore[union-attr]
    restored = catalog.reconcile(
        T, build(descriptions={"amount": "in cents"}, comment_policy=CommentPolicy.RESTORE)
    )
    assert restored.state.column("amount").comment == managed_comment("in cents")  # type: ignore[union-attr]


def test_widening_is_refused_by_the_local_backend_with_a_clear_message(catalog: LocalCatalog) -> None:
    narrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
    catalog.reconcile(T, build(narrow))
    version = catalog.describe(T).version  # type: ignore[union-attr]
    wide = narrow.set(1, pa.field("n", pa.int64()))
    with pytest.raises(PlanRefusedError, match="cannot widen") as info:
        catalog.reconcile(T, build(wide, allow_widening=True))
    assert "events.n: the local (delta-rs) backend cannot widen" in str(info.value)
    assert "(live INT, desired BIGINT)" in str(info.value)
    with pytest.raises(PlanRefusedError, match="allow_widening"):
        catalog.reconcile(T, build(wide))
    assert catalog.describe(T).version == version  # type: ignore[union-attr]


def test_refused_plan_changes_nothing(catalog: LocalCatalog) -> None:
    catalog.reconcile(T, build())
    version = catalog.describe(T).version  # type: ignore[union-attr]
    dropped = SCHEMA.remove(1).append(pa.field("new", pa.string()))
    with pytest.raises(PlanRefusedError) as info:
        catalog.reconcile(T, build(dropped))
    assert "amount" in str(info.value) and T in str(info.value)
    state = catalog.describe(T)
    assert state is not None and state.version == version and state.column("new") is None


# Names needing column mapping (a space, ",;{}()=", a tab, a newline) are refused by the local backend:
# tests/unit/zerobus_orchestration/catalog/test_local_unity_rules.py.
HOSTILE_COLUMNS = [
    "a`b",
    "it's",
    'dq"x',
    "dash-ed",
    "back\\slash",
    "日本",
    "select",
    "q?mark",
    "pipe|x",
    "star*",
]


def test_names_a_write_cannot_send_are_refused_before_the_table_exists(catalog: LocalCatalog) -> None:
    """A local table has no column mapping, where Zerobus' Arrow path takes [A-Za-z_][A-Za-z0-9_]* only:
    hostile names are refused by the plan, each named with the fix, and nothing is created."""
    hostile = pa.schema([pa.field(n, pa.int32()) for n in HOSTILE_COLUMNS])
    with pytest.raises(PlanRefusedError) as err:
        catalog.reconcile(T, build(hostile))
    for name in HOSTILE_COLUMNS:
        if name != "select":  # a plain identifier (a SQL keyword, quoted by the DDL): sendable
            assert repr(name) in str(err.value)
    assert "rename it" in str(err.value)
    assert catalog.describe(T) is None
    # The same names nested in a struct added to a live table: refused, the table unchanged.
    catalog.reconcile(T, build(pa.schema([pa.field("select", pa.int32())])))
    version = catalog.describe(T).version  # type: ignore[union-attr]
    nested = pa.schema(
        [pa.field("select", pa.int32()), pa.field("nested", pa.struct([("odd`field", pa.string())]))]
    )
    with pytest.raises(PlanRefusedError, match=r"nested\.odd`field"):
        catalog.reconcile(T, build(nested))
    assert catalog.describe(T).version == version  # type: ignore[union-attr]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMAS)
def test_a_schema_the_wire_cannot_carry_never_creates_a_local_table(
    tmp_path_factory: pytest.TempPathFactory, schema: pa.Schema
) -> None:
    from zerobus_orchestration.wire_schema import arrow_column_problems

    assume(arrow_column_problems(schema, column_mapping=False))  # sendable ones: the round trip above
    catalog = LocalCatalog(tmp_path_factory.mktemp("wh"))
    with pytest.raises((PlanRefusedError, ConfigError)):
        catalog.reconcile(T, DesiredTable.build(T, schema, Role.DERIVED))
    assert catalog.describe(T) is None


def test_table_names_needing_escapes_are_refused_loudly(catalog: LocalCatalog) -> None:
    with pytest.raises(ConfigError, match="rename the table"):
        catalog.describe("main.raw.`we ird`")


def test_registry_records_table_and_sinks(catalog: LocalCatalog) -> None:
    with pytest.raises(CatalogError, match="not registered"):
        catalog.register_sink(T, "sink-1")
    state = catalog.reconcile(T, build()).state
    catalog.register_sink(T, "sink-1")
    catalog.register_sink(T, "sink-1")
    catalog.register_sink(T, "sink-2")
    assert catalog.describe(T).sinks == ("sink-1", "sink-2")  # type: ignore[union-attr]
    with sqlite3.connect(catalog.registry_path) as db:
        row = db.execute("SELECT table_id, location, role FROM tables WHERE full_name = ?", (T,)).fetchone()
    assert row == (state.table_id, state.location, "primary_raw")
    assert catalog.registry_path == Path(catalog.warehouse) / "_zerobus" / "catalog.sqlite"


def test_table_created_outside_the_catalog_is_unregistered_until_reconciled(catalog: LocalCatalog) -> None:
    uri = table_uri(catalog.warehouse, T)
    DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64())]))
    state = catalog.describe(T)
    assert state is not None and not state.registered and state.table_id == DeltaTable(uri).metadata().id
    out = catalog.reconcile(T, build(pa.schema([pa.field("id", pa.int64())]), role=Role.DERIVED))
    assert out.state.registered


def test_locate_and_latest_version_agree_with_describe_as_the_table_changes(catalog: LocalCatalog) -> None:
    assert catalog.locate(T) is None and catalog.latest_version(T) is None
    uri = table_uri(catalog.warehouse, T)
    DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64())]))  # made outside the catalog
    outside = catalog.locate(T)
    assert outside is not None and (outside.name, outside.location, outside.registered) == (T, uri, False)
    assert catalog.latest_version(T) == 0
    catalog.reconcile(T, build(pa.schema([pa.field("id", pa.int64())]), role=Role.DERIVED))
    DeltaTable(uri).alter.add_columns([Field("note", "string")])  # another process's commit
    state = catalog.describe(T)
    located = catalog.locate(T)
    assert state is not None and located is not None and located.registered
    assert (located.name, located.location) == (state.name, state.location)
    assert catalog.latest_version(T) == state.version == DeltaTable(uri).version()


def test_vend_credentials_on_a_local_warehouse_is_a_dummy_that_expires(catalog: LocalCatalog) -> None:
    catalog.reconcile(T, build())
    creds = catalog.vend_credentials(T, Access.WRITE)
    now = datetime.now(UTC)
    assert creds.table == T and creds.access is Access.WRITE and creds.url == catalog.location(T)
    assert not creds.expired(now) and creds.expires_at > now
    assert creds.token is not None and "local-" in creds.token.get_secret_value()
    assert "local-" not in repr(creds)  # the secret is never printed
    with pytest.raises(CatalogError):
        catalog.vend_credentials("main.raw.other", Access.READ)


def test_stamped_reserved_columns_may_use_any_equivalent_encoding(catalog: LocalCatalog) -> None:
    stamped = SCHEMA.append(pa.field("_twg_emit_ts", pa.timestamp("ns", tz="UTC"))).append(
        pa.field("_twg_source", pa.large_string())
    )
    out = catalog.reconcile(T, build(stamped))
    assert out.state.column("_twg_emit_ts").delta_type == "TIMESTAMP"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="engine-owned"):
        build(SCHEMA.append(pa.field("_twg_offset", pa.string())))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SENDABLE_SCHEMAS)
def test_any_supported_schema_round_trips_through_delta(
    tmp_path_factory: pytest.TempPathFactory, schema: pa.Schema
) -> None:
    catalog = LocalCatalog(tmp_path_factory.mktemp("wh"))
    d = DesiredTable.build(T, schema, Role.DERIVED, descriptions={n: f"d {n}" for n in schema.names})
    created = catalog.reconcile(T, d)
    expected = [(f.name, arrow_storage_type(f.type), f.nullable) for f in schema]
    got = [(c.name, c.arrow_type, c.nullable) for c in created.state.columns if c.name not in RESERVED_NAMES]
    # Same columns; order too, except that delta-rs forces naive timestamps inside maps to be added last.
    assert sorted(got, key=lambda c: c[0]) == sorted(expected, key=lambda c: c[0])
    if not any(naive_timestamp_in_map(arrow_storage_type(f.type)) for f in schema):
        assert got == expected
    again = catalog.reconcile(T, d)
    assert again.plan.empty and again.state.version == created.state.version


def test_column_differing_only_in_case_is_refused_with_the_fix_not_a_delta_rs_error(
    catalog: LocalCatalog,
) -> None:
    catalog.reconcile(T, build())
    version = catalog.describe(T)
    assert version is not None
    renamed = pa.schema([pa.field("ID", pa.int64())])
    with pytest.raises(PlanRefusedError, match=r"events\.ID: live column 'id' differs only in case"):
        catalog.reconcile(T, build(renamed, subset=True))
    after = catalog.describe(T)
    assert after is not None and after.version == version.version


def test_plan_shows_the_widening_refusal_that_reconcile_raises(catalog: LocalCatalog) -> None:
    # ``zerobus-orch plan`` prints ``catalog.plan``: it must not show a widening that --apply then refuses.
    narrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
    catalog.reconcile(T, build(narrow))
    wide = build(narrow.set(1, pa.field("n", pa.int64())), allow_widening=True)
    planned = catalog.plan(T, wide)
    assert [(s.kind, getattr(s, "column", None)) for s in planned.refusals] == [("refuse", "n")]
    assert not any(s.kind == "widen_column" for s in planned.steps)
    with pytest.raises(PlanRefusedError) as info:
        catalog.reconcile(T, wide)
    assert info.value.reasons == tuple(r.describe() for r in planned.refusals)
    assert "cast the column to the live type" in info.value.reasons[0]


def test_payload_column_shadowing_an_engine_column_never_reaches_delta_rs(catalog: LocalCatalog) -> None:
    shadowing = pa.schema([pa.field("id", pa.int64()), pa.field("_TWG_OFFSET", pa.int64())])
    with pytest.raises(ConfigError, match=r"column '_TWG_OFFSET' differs only in case .* rename"):
        catalog.reconcile(T, build(shadowing))
    assert catalog.describe(T) is None
