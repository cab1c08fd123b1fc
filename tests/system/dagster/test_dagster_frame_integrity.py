"""What pandas users expect, and schema drift, through ``dg.materialize`` on the embedded emulator.

- a named index (``groupby(...).sum()``) or named MultiIndex levels land as columns; an unnamed
  RangeIndex does not;
- an empty first write creates the table, so a downstream asset loads an empty frame;
- a contracted table refuses an undeclared column before anything is sent, naming column and contract;
- an uncontracted table that gains a column logs it and shows it in the materialisation metadata.
"""

from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest

from dagster_defs import ZerobusResource, build_contract_asset

SALES_KEY = dg.AssetKey(["derived", "sales_by_currency"])


def _payload_names(table: pa.Table) -> list[str]:
    return [n for n in table.column_names if not n.startswith("_twg_")]


def _read(zerobus: ZerobusResource, table: str) -> pa.Table:
    """The rows of ``table`` once Iceberg shows everything delivered (the mirror lags the Delta commit)."""
    assert zerobus.runtime.verify(table).verified
    return zerobus.runtime.read_rows(table)


def _sales() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "currency": ["EUR", "USD", "EUR", "GBP"],
            "region": ["n", "s", "s", "n"],
            "amount": [1.0, 2.0, 3.0, 4.0],
        }
    )


def test_named_index_and_multiindex_levels_land_as_columns(zerobus: ZerobusResource, resources: dict) -> None:
    @dg.asset(key=SALES_KEY, metadata={"zerobus/role": "derived"})
    def sales_by_currency() -> pd.DataFrame:
        return _sales().groupby("currency")[["amount"]].sum()

    @dg.asset(key=["derived", "sales_by_pair"], metadata={"zerobus/role": "derived"})
    def sales_by_pair() -> pd.DataFrame:
        return _sales().groupby(["currency", "region"])[["amount"]].sum()

    @dg.asset(key=["derived", "plain_sales"], metadata={"zerobus/role": "derived"})
    def plain_sales() -> pd.DataFrame:
        return _sales()  # an unnamed RangeIndex is not data

    assert dg.materialize([sales_by_currency, sales_by_pair, plain_sales], resources=resources).success
    by_currency = _read(zerobus, "main.derived.sales_by_currency")
    assert _payload_names(by_currency) == ["currency", "amount"]
    totals = dict(zip(by_currency["currency"].to_pylist(), by_currency["amount"].to_pylist(), strict=True))
    assert totals == {"EUR": 4.0, "GBP": 4.0, "USD": 2.0}
    by_pair = _read(zerobus, "main.derived.sales_by_pair")
    assert _payload_names(by_pair) == ["currency", "region", "amount"]
    assert by_pair.num_rows == 4
    assert _payload_names(_read(zerobus, "main.derived.plain_sales")) == ["currency", "region", "amount"]


def test_empty_first_write_creates_the_table_and_downstream_loads(
    zerobus: ZerobusResource, resources: dict
) -> None:
    @dg.asset(key=["derived", "refunds"], metadata={"zerobus/role": "derived"})
    def refunds() -> pd.DataFrame:
        return pd.DataFrame(
            {"order_id": pd.Series([], dtype="int64"), "amount": pd.Series([], dtype="float64")}
        )

    @dg.asset(key=["derived", "refund_count"], ins={"refunds": dg.AssetIn(["derived", "refunds"])})
    def refund_count(refunds: pd.DataFrame) -> pa.Table:
        return pa.table({"rows": [len(refunds)], "columns": [",".join(refunds.columns)]})

    result = dg.materialize([refunds, refund_count], resources=resources, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    state = zerobus.runtime.catalog.describe("main.derived.refunds")
    assert state is not None
    assert [c.name for c in state.columns if not c.name.startswith("_twg_")] == ["order_id", "amount"]
    counted = _read(zerobus, "main.derived.refund_count")
    assert counted["rows"].to_pylist() == [0]
    assert counted["columns"].to_pylist() == ["order_id,amount"]


ORDERS_KEY = dg.AssetKey(["raw", "contracted_orders"])
ORDERS_SCHEMA = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("amount", pa.float64())])
orders_contract = build_contract_asset(ORDERS_KEY, schema=ORDERS_SCHEMA)


@dg.asset(key=ORDERS_KEY, deps=[orders_contract.key])
def contracted_orders() -> pd.DataFrame:
    return pd.DataFrame({"order_id": [1, 2], "amount": [1.5, 2.5], "extra": ["x", "y"]})


def _failure_text(result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(
        str(e.step_failure_data.error) for e in result.all_events if e.is_step_failure and e.step_failure_data
    )


@pytest.mark.parametrize("with_contract_in_run", [True, False])
def test_contract_refuses_an_undeclared_column_before_sending(
    zerobus: ZerobusResource, resources: dict, with_contract_in_run: bool
) -> None:
    if not with_contract_in_run:  # the table exists from an earlier contract run; only the data asset runs
        assert dg.materialize(orders_contract.definitions, resources=resources).success
    assets: list[Any] = [*orders_contract.definitions, contracted_orders]
    selection = None if with_contract_in_run else [ORDERS_KEY]
    result = dg.materialize(assets, resources=resources, selection=selection, raise_on_error=False)
    assert not result.success
    text = _failure_text(result)
    assert "'extra'" in text and "raw/contracted_orders__contract" in text, text
    state = zerobus.runtime.catalog.describe("main.raw.contracted_orders")
    assert state is not None and state.column("extra") is None
    assert zerobus.runtime.coverage_map("main.raw.contracted_orders") == {}  # nothing was sent


def _materialization_meta(result: dg.ExecuteInProcessResult) -> Any:
    return result.get_asset_materialization_events()[0].materialization.metadata


def test_uncontracted_new_column_is_logged_and_in_metadata(zerobus: ZerobusResource, resources: dict) -> None:
    instance = dg.DagsterInstance.ephemeral()
    columns = {"id": [1, 2]}

    @dg.asset(key=["derived", "drifting"], metadata={"zerobus/role": "derived"})
    def drifting() -> pd.DataFrame:
        return pd.DataFrame(columns)

    first = dg.materialize([drifting], resources=resources, instance=instance)
    meta = _materialization_meta(first)
    assert "zerobus/schema_changes" not in meta  # creating the table is not drift
    columns["extra"] = ["a", "b"]
    second = dg.materialize([drifting], resources=resources, instance=instance)
    assert second.success
    changes = _materialization_meta(second)["zerobus/schema_changes"]
    assert [c["column"] for c in changes.value] == ["extra"]  # type: ignore[union-attr]
    warnings = [
        r.user_message
        for r in instance.all_logs(second.run_id)
        if r.level >= 30 and "extra" in r.user_message and "main.derived.drifting" in r.user_message
    ]
    assert warnings, "the added column was not logged"
    assert zerobus.runtime.catalog.describe("main.derived.drifting").column("extra") is not None  # type: ignore[union-attr]
