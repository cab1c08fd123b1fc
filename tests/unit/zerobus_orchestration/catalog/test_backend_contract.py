"""Reconcile, comment-sync and precondition scenarios shared by every ``TableCatalog`` backend.

Where the backends legitimately differ, each backend's documented behaviour is asserted explicitly:
- widening a primary_raw table: ``local`` refuses it even when opted in (it widens only by rewriting a
  derived table); ``unity`` runs it;
- write credentials: ``local`` vends a dummy; ``unity`` raises ``NotSupportedError`` (managed tables);
- primary_raw: ``local`` reports column mapping and UniForm as emulated; ``unity`` has the real protocol.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from tests.support.uc_fixtures import Backend
from zerobus_orchestration.catalog.base import Access, DesiredTable, TableTags
from zerobus_orchestration.catalog.plan import plan
from zerobus_orchestration.catalog.preconditions import check_primary_raw, unmet
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import managed_comment
from zerobus_orchestration.errors import CatalogError, ConfigError, NotSupportedError, PlanRefusedError

TABLE = "main.raw.events"

RICH_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int16()),
        pa.field("count", pa.int32()),
        pa.field("ratio", pa.float32()),
        pa.field("amount", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("name", pa.large_string()),
        pa.field("blob", pa.binary()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("ms", tz="Europe/Paris")),
        pa.field("price", pa.decimal128(12, 2)),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field("point", pa.struct([("x", pa.float64()), ("label", pa.string())])),
        pa.field("unsigned", pa.uint32()),
    ]
)


def base_schema(*extra: pa.Field) -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), *extra])


def want(*extra: pa.Field, role: Role = Role.DERIVED, **kwargs: object) -> DesiredTable:
    return DesiredTable.build(TABLE, base_schema(*extra), role, **kwargs)  # type: ignore[arg-type]


def version(backend: Backend) -> int | None:
    state = backend.catalog.describe(TABLE)
    return state.version if state else None


def test_absent_table_describes_as_none(backend: Backend) -> None:
    assert backend.catalog.describe(TABLE) is None


def test_create_maps_every_type_the_same_way(backend: Backend) -> None:
    desired = DesiredTable.build(TABLE, RICH_SCHEMA, Role.DERIVED, tags=TableTags(owner="team-a"))
    outcome = backend.catalog.reconcile(TABLE, desired)
    assert outcome.applied and outcome.version_before is None
    state = outcome.state
    assert [c.name for c in state.columns] == [
        *RICH_SCHEMA.names,
        "_twg_emit_ts",
        "_twg_source",
        "_twg_offset",
    ]
    types = {c.name: c.delta_type for c in state.columns}
    assert types == {
        "id": "BIGINT",
        "small": "SMALLINT",
        "count": "INT",
        "ratio": "FLOAT",
        "amount": "DOUBLE",
        "ok": "BOOLEAN",
        "name": "STRING",
        "blob": "BINARY",
        "day": "DATE",
        "at": "TIMESTAMP",
        "price": "DECIMAL(12,2)",
        "tags": "ARRAY<STRING>",
        "attrs": "MAP<STRING, BIGINT>",
        "point": "STRUCT<x: DOUBLE, label: STRING>",
        "unsigned": "BIGINT",
        "_twg_emit_ts": "TIMESTAMP",
        "_twg_source": "STRING",
        "_twg_offset": "BIGINT",
    }
    assert not state.column("id").nullable  # type: ignore[union-attr]
    assert state.properties["twg.owner"] == "team-a" and state.properties["twg.role"] == "derived"
    assert state.role is Role.DERIVED and state.registered
    # The declared target schema is identical on both backends (what the sink sends).
    assert state.arrow_schema().field("at").type == pa.timestamp("us", tz="UTC")
    assert state.arrow_schema().field("unsigned").type == pa.int64()


def test_a_column_no_write_could_send_is_refused_before_the_table_exists(backend: Backend) -> None:
    """reconcile (a contract asset, the reconcile operator) holds the wire's rules as a write does."""
    odd = pa.field("point", pa.struct([("x", pa.float64()), ("odd`name", pa.string())]))
    nested = pa.field("grid", pa.list_(pa.list_(pa.int64())))
    with pytest.raises(PlanRefusedError) as err:
        backend.catalog.reconcile(TABLE, want(odd, nested))
    text = str(err.value)
    assert "point.odd`name" in text and "rename it" in text
    assert "'grid" in text and "array of arrays" in text
    assert backend.catalog.describe(TABLE) is None


def test_reconcile_is_idempotent(backend: Backend) -> None:
    desired = want(descriptions={"id": "Event id"})
    first = backend.catalog.reconcile(TABLE, desired)
    again = backend.catalog.reconcile(TABLE, desired)
    assert not again.applied and again.plan.empty
    assert again.version_before == again.version_after == first.version_after


def test_add_column_evolves_without_touching_existing_ones(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want())
    before = version(backend)
    outcome = backend.catalog.reconcile(
        TABLE, want(pa.field("amount", pa.float64()), descriptions={"amount": "EUR"})
    )
    assert [s.kind for s in outcome.plan.steps] == ["add_column"]
    assert outcome.version_before == before and outcome.version_after is not None
    assert before is not None and outcome.version_after > before
    amount = outcome.state.column("amount")
    assert amount is not None and amount.nullable and amount.delta_type == "DOUBLE"
    assert amount.comment is not None and amount.comment.startswith("EUR [twg:managed h=")


def test_plans_agree_between_backends_for_the_same_history(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want(descriptions={"id": "v1"}))
    state = backend.catalog.describe(TABLE)
    nxt = want(pa.field("extra", pa.int32()), descriptions={"id": "v2", "name": "Display name"})
    # The exact same text on both backends: a drift in describe() would show up here.
    assert str(plan(state, nxt)) == (
        "main.raw.events: 3 step(s)\n"
        "  - add column extra INT to main.raw.events\n"
        f"  - set comment of main.raw.events.id to {managed_comment('v2')!r}\n"
        f"  - set comment of main.raw.events.name to {managed_comment('Display name')!r}"
    )


@pytest.mark.parametrize("policy", [CommentPolicy.RESPECT, CommentPolicy.RESTORE])
def test_comment_sync(backend: Backend, policy: CommentPolicy) -> None:
    backend.catalog.reconcile(TABLE, want(descriptions={"id": "v1"}, comment_policy=policy))
    changed = backend.catalog.reconcile(TABLE, want(descriptions={"id": "v2"}, comment_policy=policy))
    assert [s.kind for s in changed.plan.steps] == ["set_comment"]
    same = backend.catalog.reconcile(TABLE, want(descriptions={"id": "v2"}, comment_policy=policy))
    assert same.plan.empty and not same.applied
    backend.human_comment(TABLE, "id", "hand written")
    after_edit = backend.catalog.reconcile(TABLE, want(descriptions={"id": "v3"}, comment_policy=policy))
    comment = after_edit.state.column("id").comment  # type: ignore[union-attr]
    if policy is CommentPolicy.RESPECT:
        assert comment == "hand written" and not after_edit.applied
        assert any("edited outside the catalog" in n for n in after_edit.notes)
    else:
        assert comment is not None and comment.startswith("v3 [twg:managed")


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (pa.schema([pa.field("id", pa.int64(), nullable=False)]), "missing from the desired schema"),
        (base_schema(pa.field("must", pa.int32(), nullable=False)), "NOT NULL"),
        (pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("name", pa.string())]), "narrowing"),
        (base_schema(pa.field("huge", pa.uint64())), "uint64"),
    ],
    ids=["drop", "new-not-null", "narrowing", "uint64"],
)
def test_refusals_change_nothing(backend: Backend, schema: pa.Schema, reason: str) -> None:
    backend.catalog.reconcile(TABLE, want())
    before = version(backend)
    with pytest.raises(PlanRefusedError) as info:
        backend.catalog.reconcile(TABLE, DesiredTable.build(TABLE, schema, Role.DERIVED))
    assert any(reason in r for r in info.value.reasons), info.value.reasons
    assert version(backend) == before


def test_widening_is_backend_specific(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want(pa.field("n", pa.int32())))
    with pytest.raises(PlanRefusedError, match="widening"):
        backend.catalog.reconcile(TABLE, want(pa.field("n", pa.int64())))
    opted_in = want(pa.field("n", pa.int64()), allow_widening=True)
    # Both widen a derived table: Unity with ALTER COLUMN TYPE, local by rewriting the table.
    outcome = backend.catalog.reconcile(TABLE, opted_in)
    assert outcome.state.column("n").delta_type == "BIGINT"  # type: ignore[union-attr]


def test_primary_raw_preconditions_hold_after_reconcile(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want(role=Role.PRIMARY_RAW))
    conditions = check_primary_raw(backend.catalog, TABLE)
    assert unmet(conditions) == []
    state = backend.catalog.describe(TABLE)
    assert state is not None and state.role is Role.PRIMARY_RAW
    assert state.properties["delta.enableDeletionVectors"] == "false"
    if backend.kind == "local":
        assert state.emulated == {"columnMapping", "uniform"}
        assert "icebergCompatV2" not in state.protocol.features  # embedded mode must not claim it
    else:
        assert state.emulated == frozenset()
        assert {"columnMapping", "icebergCompatV2"} <= state.protocol.writer_features


def test_derived_table_is_not_primary_raw_eligible(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want())
    missing = {c.name for c in unmet(check_primary_raw(backend.catalog, TABLE))}
    assert "iceberg_reads" in missing and "column_mapping" in missing


def test_register_sink_is_idempotent(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want())
    backend.catalog.register_sink(TABLE, "sink-a")
    backend.catalog.register_sink(TABLE, "sink-a")
    backend.catalog.register_sink(TABLE, "sink-b")
    state = backend.catalog.describe(TABLE)
    assert state is not None and state.sinks == ("sink-a", "sink-b")


def test_vended_credentials(backend: Backend) -> None:
    backend.catalog.reconcile(TABLE, want())
    read = backend.catalog.vend_credentials(TABLE, Access.READ)
    assert read.table == TABLE and read.access is Access.READ
    assert read.expires_at.tzinfo is not None and not read.expired(datetime.now(UTC))
    assert read.expired(read.expires_at)
    if backend.kind == "local":
        write = backend.catalog.vend_credentials(TABLE, Access.WRITE)
        assert write.access is Access.WRITE
    else:
        with pytest.raises(NotSupportedError):
            backend.catalog.vend_credentials(TABLE, Access.WRITE)


def test_absent_table_cannot_take_sinks_or_credentials(backend: Backend) -> None:
    with pytest.raises(CatalogError):
        backend.catalog.register_sink(TABLE, "sink-a")
    with pytest.raises(CatalogError):
        backend.catalog.vend_credentials(TABLE, Access.READ)


@pytest.mark.parametrize("column", ["_TWG_OFFSET", "_Twg_Source"])
def test_payload_column_shadowing_an_engine_column_is_refused_before_any_ddl(
    backend: Backend, column: str
) -> None:
    # Before: delta-rs failed the create with a raw duplicate-field error (after one silent retry) and
    # Unity Catalog with COLUMN_ALREADY_EXISTS, which reconcile retried as a lost race.
    with pytest.raises(ConfigError) as info:
        backend.catalog.reconcile(TABLE, want(pa.field(column, pa.int64())))
    message = str(info.value)
    assert f"table {TABLE}: column {column!r}" in message and "rename the payload column" in message
    assert backend.catalog.describe(TABLE) is None


def test_live_column_shadowing_an_engine_column_is_refused_naming_the_fix(backend: Backend) -> None:
    # A table made outside this package whose "_TWG_OFFSET" would collide with the stamped _twg_offset.
    if backend.fake is not None:
        backend.fake.execute_sql(
            f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name STRING, _TWG_OFFSET BIGINT)"
        )
    else:
        from deltalake import DeltaTable

        assert backend.local is not None
        outside = base_schema(pa.field("_TWG_OFFSET", pa.int64()))
        DeltaTable.create(backend.local.location(TABLE), outside)
    before = version(backend)
    with pytest.raises(
        PlanRefusedError, match=r"events\._twg_offset: live column '_TWG_OFFSET' differs"
    ) as info:
        backend.catalog.reconcile(TABLE, want())
    assert "rename the live column '_TWG_OFFSET'" in str(info.value)
    assert version(backend) == before
