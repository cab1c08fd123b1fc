"""Contract assets and blocking primary-raw checks: the reconcile is the materialisation, a failed check stops the write."""

from decimal import Decimal
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from dagster_defs import PRIMARY_RAW_CHECKS, ZerobusResource, build_contract_asset, contract_key_for
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.tables import table_uri

LEDGER_KEY = dg.AssetKey(["raw", "ledger"])
LEDGER_COLUMNS = dg.TableSchema(
    columns=[
        dg.TableColumn(
            "entry_id", "BIGINT", "Ledger entry number.", dg.TableColumnConstraints(nullable=False)
        ),
        dg.TableColumn("amount", "DECIMAL(12,2)", "Signed amount in EUR."),
        dg.TableColumn("memo", "STRING"),
    ]
)
ledger_contract = build_contract_asset(LEDGER_KEY, column_schema=LEDGER_COLUMNS)


@dg.asset(key=LEDGER_KEY, deps=[ledger_contract.key])
def ledger() -> pa.Table:
    return pa.table(
        {
            "entry_id": pa.array([1, 2], pa.int64()),
            "amount": pa.array([Decimal("100.00"), Decimal("-25.50")], pa.decimal128(12, 2)),
            "memo": ["open", "fee"],
        }
    )


def _rows_in_delta(cfg: ZerobusConfig, table: str) -> int:
    # From the add actions: delta-rs cannot scan a table whose deletion-vector feature is on.
    actions = DeltaTable(table_uri(cfg.warehouse, table)).get_add_actions(flatten=True)
    return int(sum(actions.column("num_records").to_pylist())) if actions.num_rows else 0


def test_contract_reconciles_with_comments_and_checks_pass(zb_config: ZerobusConfig, resources: dict) -> None:
    result = dg.materialize([*ledger_contract.definitions, ledger], resources=resources)
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert sorted(e.check_name for e in evaluations) == sorted(PRIMARY_RAW_CHECKS)
    assert all(e.passed for e in evaluations)
    contract_meta = result.asset_materializations_for_node("raw__ledger__contract")[0].metadata
    assert contract_meta["zerobus/applied"].value is True
    assert contract_meta["zerobus/plan"].value["steps"][0]["kind"] == "create_table"
    assert "create_table" in contract_meta["zerobus/plan_markdown"].value
    live = {c.name: c.description for c in contract_meta["dagster/column_schema"].schema.columns}
    assert live["amount"] == "Signed amount in EUR."
    assert live["_twg_offset"], "engine-owned columns carry their built-in description"
    assert _rows_in_delta(zb_config, "main.raw.ledger") == 2

    again = dg.materialize(ledger_contract.definitions, resources=resources)
    assert (
        again.asset_materializations_for_node("raw__ledger__contract")[0].metadata["zerobus/applied"].value
        is False
    )


def test_failed_primary_raw_check_stops_the_write(zb_config: ZerobusConfig, resources: dict) -> None:
    assert dg.materialize([ledger_contract.asset], resources=resources).success
    # Someone enables deletion vectors on the live table: Iceberg readers could no longer read it.
    DeltaTable(table_uri(zb_config.warehouse, "main.raw.ledger")).alter.set_table_properties(
        {"delta.enableDeletionVectors": "true"}, raise_if_not_exists=False
    )
    result = dg.materialize([*ledger_contract.definitions, ledger], resources=resources, raise_on_error=False)
    assert not result.success
    by_name = {e.check_name: e for e in result.get_asset_check_evaluations()}
    failed = by_name["deletion_vectors_disabled"]
    assert not failed.passed
    assert "deletionVectors" in (failed.description or "") and "main.raw.ledger" in (failed.description or "")
    assert all(e.passed for name, e in by_name.items() if name != "deletion_vectors_disabled")
    assert not result.asset_materializations_for_node("raw__ledger"), "the data asset must not run"
    assert _rows_in_delta(zb_config, "main.raw.ledger") == 0, "nothing may be written"


def test_derived_contract_has_no_primary_raw_checks() -> None:
    contract = build_contract_asset(
        ["analytics", "totals"], schema=pa.schema([("n", pa.int64())]), role="derived"
    )
    assert contract.checks is None and contract.check_keys == ()
    assert contract.table == "main.analytics.totals"
    assert contract.key == dg.AssetKey(["analytics", "totals__contract"])


def test_contract_needs_exactly_one_column_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of schema="):
        build_contract_asset(["raw", "x"])
    with pytest.raises(ConfigError, match="exactly one of schema="):
        build_contract_asset(
            ["raw", "x"], schema=pa.schema([("a", pa.int64())]), column_schema=LEDGER_COLUMNS
        )


def test_contract_from_odcs_file_stamps_contract_descriptions(
    tmp_path: Path, zerobus: ZerobusResource
) -> None:
    contract_file = tmp_path / "tickets.odcs.yaml"
    contract_file.write_text(
        """
apiVersion: v3.0.2
kind: DataContract
id: tickets
version: 2.0.0
status: active
schema:
  - name: tickets
    properties:
      - name: ticket_id
        physicalType: BIGINT
        required: true
        description: Support ticket number.
      - name: subject
        logicalType: string
        description: What the customer wrote in the subject line.
"""
    )
    contract = build_contract_asset(["raw", "tickets"], contract_path=contract_file)
    result = dg.materialize(contract.definitions, resources={"zerobus": zerobus})
    assert result.success
    live = result.asset_materializations_for_node("raw__tickets__contract")[0].metadata[
        "dagster/column_schema"
    ]
    described = {c.name: c.description for c in live.schema.columns}
    assert described["subject"] == "What the customer wrote in the subject line."


PAYMENTS_KEY = dg.AssetKey(["raw", "payments"])


@dg.asset(
    key=PAYMENTS_KEY,
    deps=[contract_key_for(PAYMENTS_KEY)],
    metadata={
        "zerobus/table": "payments_v2",
        "dagster/column_schema": dg.TableSchema(
            columns=[
                dg.TableColumn("payment_id", "BIGINT", "Payment number."),
                dg.TableColumn("method", "STRING", "card, transfer or cash."),
            ]
        ),
    },
)
def payments() -> pa.Table:
    return pa.table({"payment_id": pa.array([7], pa.int64()), "method": ["card"]})


def test_contract_built_from_the_data_asset_uses_its_column_schema_and_name(resources: dict) -> None:
    contract = build_contract_asset(payments)
    assert contract.key == contract_key_for(PAYMENTS_KEY)
    assert contract.table == "main.raw.payments_v2", (
        "the IO manager's naming metadata applies to the contract"
    )
    result = dg.materialize([*contract.definitions, payments], resources=resources)
    assert result.success
    live = result.asset_materializations_for_node("raw__payments__contract")[0].metadata[
        "dagster/column_schema"
    ]
    described = {c.name: (c.type, c.description) for c in live.schema.columns}
    assert described["method"] == ("STRING", "card, transfer or cash.")
    written = result.asset_materializations_for_node("raw__payments")[0].metadata
    assert written["dagster/table_name"].value == "main.raw.payments_v2"
