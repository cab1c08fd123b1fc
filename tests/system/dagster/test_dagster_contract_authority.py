"""The contract is the authority: a run of the data asset without its contract asset still creates and
evolves the table from the contract, never from the output's inferred schema."""

from decimal import Decimal

import dagster as dg
import pandas as pd
import pyarrow as pa

from dagster_defs import ZerobusResource, build_contract_asset, build_zerobus_definitions
from dagster_defs.contract_definition import CONTRACT
from zerobus_orchestration.catalog.base import TableState

PAYMENTS_KEY = dg.AssetKey(["raw", "payments"])
PAYMENTS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.decimal128(18, 2))])
payments_contract = build_contract_asset(
    PAYMENTS_KEY, schema=PAYMENTS, descriptions={"amount": "Amount in EUR."}, owner="payments-team"
)


def payments_frame() -> pd.DataFrame:
    # What pandas users hand over: Arrow infers ``id`` nullable and ``amount`` as DECIMAL(3,2).
    return pd.DataFrame({"id": [1, 2], "amount": [Decimal("1.50"), Decimal("2.25")]})


@dg.asset(
    key=PAYMENTS_KEY,
    deps=[payments_contract.key],
    kinds=payments_contract.kinds,
    metadata=payments_contract.data_metadata,
)
def payments() -> pd.DataFrame:
    return payments_frame()


@dg.asset(key=PAYMENTS_KEY, deps=[payments_contract.key])
def payments_plain() -> pd.DataFrame:
    """The same asset declaring only the dependency on its contract."""
    return payments_frame()


def _columns(zerobus: ZerobusResource) -> dict[str, tuple[str, bool]]:
    state = zerobus.runtime.catalog.describe("main.raw.payments")
    assert isinstance(state, TableState)
    return {c.name: (c.delta_type, c.nullable) for c in state.columns if not c.name.startswith("_twg_")}


def _contract_runs_clean(resources: dict[str, object]) -> None:
    result = dg.materialize(payments_contract.definitions, resources=resources)
    assert result.success
    meta = result.asset_materializations_for_node("raw__payments__contract")[0].metadata
    assert meta["zerobus/steps"].value == 0, meta["zerobus/plan_markdown"].value  # nothing left to fix
    assert all(e.passed for e in result.get_asset_check_evaluations())


def test_the_data_asset_alone_creates_the_table_from_its_contract(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    assert zerobus.runtime.catalog.describe("main.raw.payments") is None
    assert dg.materialize([payments], resources=resources).success

    assert _columns(zerobus) == {"id": ("BIGINT", False), "amount": ("DECIMAL(18,2)", True)}
    state = zerobus.runtime.catalog.describe("main.raw.payments")
    assert state is not None
    assert state.column("amount").comment is not None  # the contract's comment, stamped by the IO manager
    assert "Amount in EUR." in str(state.column("amount").comment)
    assert state.properties.get("twg.owner") == "payments-team"
    _contract_runs_clean(resources)
    assert dg.materialize([payments], resources=resources).success  # and later runs keep working
    assert zerobus.runtime.verify("main.raw.payments", source="raw/payments").verified
    assert zerobus.runtime.read_rows("main.raw.payments").num_rows == 2  # the same output: sent once


def test_the_ui_materialising_only_the_data_asset_reconciles_from_the_contract(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    # The UI's "Materialize" on the data asset: the contract is in the code location, not in the run.
    defs = dg.Definitions(assets=[*payments_contract.definitions, payments_plain], resources=resources)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(asset_selection=[PAYMENTS_KEY]).success

    assert _columns(zerobus) == {"id": ("BIGINT", False), "amount": ("DECIMAL(18,2)", True)}
    _contract_runs_clean(resources)


def test_without_the_contract_definition_the_table_is_not_created_by_inference(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    result = dg.materialize([payments_plain], resources=resources, raise_on_error=False)

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = str(failure.step_failure_data.error)
    assert "raw/payments__contract" in message and "main.raw.payments" in message
    assert "metadata=contract.data_metadata" in message
    assert zerobus.runtime.catalog.describe("main.raw.payments") is None  # nothing half-made
    # Once the contract asset ran, the same asset writes into the contract's table.
    assert dg.materialize(payments_contract.definitions, resources=resources).success
    assert dg.materialize([payments_plain], resources=resources).success
    assert _columns(zerobus) == {"id": ("BIGINT", False), "amount": ("DECIMAL(18,2)", True)}


def test_build_zerobus_definitions_declares_the_contract_on_the_data_asset(zerobus: ZerobusResource) -> None:
    defs = build_zerobus_definitions(
        assets=[payments_plain], tables=[payments_contract], resource=zerobus, readback_sensor=False
    )
    node = defs.resolve_asset_graph().get(PAYMENTS_KEY)

    assert node.kinds == {"databricks", "delta"}
    assert node.metadata["dagster/table_name"] == "main.raw.payments"
    assert node.metadata[CONTRACT] == "raw/payments__contract"
    columns = {
        c.name: (c.type, c.constraints.nullable) for c in node.metadata["dagster/column_schema"].columns
    }
    assert columns == {"id": ("BIGINT", False), "amount": ("DECIMAL(18,2)", True)}
    # A run of the data asset alone through these definitions creates the table from the contract.
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(asset_selection=[PAYMENTS_KEY]).success
    assert _columns(zerobus) == {"id": ("BIGINT", False), "amount": ("DECIMAL(18,2)", True)}
