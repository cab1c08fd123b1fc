"""The local backend applies Unity Catalog's rules (issue 16 items 5 and 9), against real delta-rs and SQLite.

- a catalog exists only when created (``catalogs=``, ``catalog.local_catalogs``): a typo is refused;
- a column name that needs column mapping is refused naming the column and the fix (Unity turns column
  mapping on for it; delta-rs cannot evolve or faithfully read such a table);
- an opted-in widening of a derived table rewrites the table as one new version, keeping the data;
- every widening refusal names the setting, ``catalog.allow_widening``;
- a derived table created by a write without a contract gets ``DECIMAL(38, s)`` decimals.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.base import DesiredTable, TableTags
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.contracts import managed_comment
from zerobus_orchestration.errors import PlanRefusedError

T = "main.derived.totals"
TYPO = "mian.derived.totals"
NARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32())])
WIDE = NARROW.set(1, pa.field("n", pa.int64()))


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    return LocalCatalog(tmp_path / "wh")


def derived(schema: pa.Schema, table: str = T, **kw: object) -> DesiredTable:
    return DesiredTable.build(table, schema, Role.DERIVED, **kw)  # type: ignore[arg-type]


# -- catalogs exist only when created -----------------------------------------------------------------


def test_a_catalog_typo_is_refused_naming_the_catalog_the_known_ones_and_the_fix(
    catalog: LocalCatalog, tmp_path: Path
) -> None:
    planned = catalog.plan(TYPO, derived(NARROW, TYPO))
    assert [s.kind for s in planned.steps] == ["refuse"]  # ``zerobus-orch plan`` shows it too
    with pytest.raises(PlanRefusedError) as info:
        catalog.reconcile(TYPO, derived(NARROW, TYPO))
    message = str(info.value)
    assert "catalog 'mian' does not exist" in message and "known catalogs: main" in message
    assert "catalog.local_catalogs" in message and "ZEROBUS_CATALOG__LOCAL_CATALOGS=main,mian" in message
    assert catalog.describe(TYPO) is None
    assert not (tmp_path / "wh" / "mian").exists()  # nothing half-created


def test_a_listed_catalog_exists_and_a_catalog_holding_a_table_stays_known(tmp_path: Path) -> None:
    listed = LocalCatalog(tmp_path / "wh", catalogs=("main", "dev"))
    assert listed.reconcile("dev.raw.t", derived(NARROW, "dev.raw.t")).applied
    # A warehouse opened without listing ``dev`` still knows it: it holds a registered table.
    again = LocalCatalog(tmp_path / "wh")
    assert again.known_catalogs() == {"main", "dev"}
    assert again.reconcile("dev.raw.u", derived(NARROW, "dev.raw.u")).applied


# -- names that need column mapping ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "column", "fix"),
    [
        (pa.schema([pa.field("order id", pa.int64())]), "order id", "'order_id'"),
        (
            pa.schema([pa.field("p", pa.struct([("unit price", pa.float64())]))]),
            "p.unit price",
            "'unit_price'",
        ),
    ],
)
def test_a_name_needing_column_mapping_is_refused_locally_naming_column_and_fix(
    catalog: LocalCatalog, schema: pa.Schema, column: str, fix: str
) -> None:
    with pytest.raises(PlanRefusedError) as info:
        catalog.reconcile(T, derived(schema))
    assert info.value.columns == (column,)
    message = str(info.value)
    assert (
        f"{T}.{column}: " in message
        and "column mapping" in message
        and f"rename the column (e.g. {fix})" in message
    )
    assert catalog.describe(T) is None


def test_adding_a_name_needing_column_mapping_is_refused_and_changes_nothing(catalog: LocalCatalog) -> None:
    version = catalog.reconcile(T, derived(NARROW)).state.version
    with pytest.raises(PlanRefusedError, match=r"totals\.a=b: .*column mapping"):
        catalog.reconcile(T, derived(NARROW.append(pa.field("a=b", pa.string()))))
    state = catalog.describe(T)
    assert state is not None and state.version == version and state.column("a=b") is None


# -- widening -----------------------------------------------------------------------------------------


def test_an_opted_in_widening_rewrites_a_derived_table_keeping_rows_id_comments_and_properties(
    catalog: LocalCatalog,
) -> None:
    created = catalog.reconcile(
        T, derived(NARROW, descriptions={"n": "a count"}, tags=TableTags(owner="team-a"))
    ).state
    live = created.arrow_schema()
    rows = {"id": [1, 2], "n": [7, None]}
    write_deltalake(
        created.location, pa.table({**rows, **_nulls(live, 2, set(rows))}, schema=live), mode="append"
    )
    before = DeltaTable(created.location).version()
    outcome = catalog.reconcile(T, derived(WIDE, descriptions={"n": "a count"}, allow_widening=True))
    assert [s.kind for s in outcome.plan.steps] == ["widen_column"]
    state = outcome.state
    assert state.column("n").delta_type == "BIGINT"  # type: ignore[union-attr]
    assert state.version == before + 1  # one atomic version
    assert state.table_id == created.table_id and state.properties["twg.owner"] == "team-a"
    assert state.column("n").comment == managed_comment("a count")  # type: ignore[union-attr]
    rows = DeltaTable(state.location).to_pyarrow_table().sort_by("id")
    assert rows.column("n").type == pa.int64() and rows.column("n").to_pylist() == [7, None]
    assert catalog.reconcile(T, derived(WIDE, descriptions={"n": "a count"}, allow_widening=True)).plan.empty


def test_without_the_setting_the_refusal_names_catalog_allow_widening(catalog: LocalCatalog) -> None:
    catalog.reconcile(T, derived(NARROW))
    with pytest.raises(PlanRefusedError) as info:
        catalog.reconcile(T, derived(WIDE))
    message = str(info.value)
    assert "catalog.allow_widening" in message and "ZEROBUS_CATALOG__ALLOW_WIDENING=true" in message
    assert "allow_widening=True" not in message


def test_a_primary_raw_table_is_not_rewritten(catalog: LocalCatalog) -> None:
    raw = "main.raw.events"
    catalog.reconcile(raw, DesiredTable.build(raw, NARROW, Role.PRIMARY_RAW))
    with pytest.raises(PlanRefusedError, match="cannot widen a primary_raw table"):
        catalog.reconcile(raw, DesiredTable.build(raw, WIDE, Role.PRIMARY_RAW, allow_widening=True))


def _nulls(schema: pa.Schema, count: int, skip: set[str]) -> dict[str, pa.Array]:
    return {f.name: pa.nulls(count, f.type) for f in schema if f.name not in skip}


# -- inferred decimals --------------------------------------------------------------------------------


def test_a_derived_table_created_by_a_write_gets_decimals_with_room(catalog: LocalCatalog) -> None:
    inferred = pa.table({"total": [Decimal("123456.78")]}).schema  # pyarrow infers decimal128(8, 2)
    assert inferred.field("total").type == pa.decimal128(8, 2)
    state = catalog.reconcile(T, derived(inferred, subset=True)).state
    assert state.column("total").delta_type == "DECIMAL(38,2)"  # type: ignore[union-attr]
    # The next run's larger values fit without any widening.
    bigger = pa.table({"total": [Decimal("12345678901.23")]}).schema
    assert catalog.plan(T, derived(bigger, subset=True)).empty


def test_declared_decimals_keep_their_precision(catalog: LocalCatalog) -> None:
    declared = pa.schema([pa.field("total", pa.decimal128(12, 2))])
    contracted = derived(declared, subset=True, tags=TableTags(contract_uri="file:///c.yaml"))
    assert catalog.reconcile(T, contracted).state.column("total").delta_type == "DECIMAL(12,2)"  # type: ignore[union-attr]
    planned = LocalCatalog(catalog.warehouse + "2").reconcile(T, derived(declared))  # an explicit plan
    assert planned.state.column("total").delta_type == "DECIMAL(12,2)"  # type: ignore[union-attr]
