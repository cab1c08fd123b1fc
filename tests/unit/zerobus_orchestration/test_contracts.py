"""Column descriptions: ODCS contracts, explicit mappings, and the managed-comment marker."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.contracts import (
    CommentStatus,
    comment_status,
    descriptions_from_contract,
    descriptions_from_mapping,
    managed_comment,
    parse_comment,
)
from zerobus_orchestration.errors import ConfigError

CONTRACT = """
apiVersion: v3.0.2
kind: DataContract
id: orders-contract
version: 1.2.0
status: active
name: orders
team:
  name: team-orders
schema:
  - name: orders
    physicalName: events
    properties:
      - name: id
        logicalType: integer
        description: Order id
      - name: amount
        physicalName: amount_cents
        logicalType: integer
        description: "  Amount in cents  "
      - name: note
        logicalType: string
  - name: refunds
    properties:
      - name: id
        description: Refund id
"""


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    path = tmp_path / "orders.odcs.yaml"
    path.write_text(CONTRACT, encoding="utf-8")
    return path


def test_descriptions_from_an_odcs_contract(contract: Path) -> None:
    found = descriptions_from_contract(contract, "events")
    assert found.descriptions == {"id": "Order id", "amount_cents": "Amount in cents"}  # note has none
    assert found.contract_version == "1.2.0" and found.owner == "team-orders"
    assert found.contract_uri == contract.resolve().as_uri()
    assert descriptions_from_contract(contract, "refunds").descriptions == {"id": "Refund id"}


def test_ambiguous_or_broken_contracts_fail_naming_the_file(contract: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"available: \[.orders., .refunds.\]"):
        descriptions_from_contract(contract)
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        descriptions_from_contract(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        descriptions_from_contract(tmp_path / "missing.yaml")


def test_explicit_mapping_drops_blank_descriptions() -> None:
    assert descriptions_from_mapping({"a": " x ", "b": "  ", "c": ""}).descriptions == {"a": "x"}


@given(st.text())
def test_managed_comment_round_trips_any_description(description: str) -> None:
    comment = managed_comment(description)
    parsed = parse_comment(comment)
    assert parsed.managed and parsed.intact and parsed.text == description
    assert comment_status(comment, description) is CommentStatus.CURRENT


def test_comment_status_distinguishes_stale_edited_and_unmanaged() -> None:
    assert comment_status(None, "x") is CommentStatus.ABSENT
    assert comment_status(managed_comment("old"), "new") is CommentStatus.STALE
    edited = managed_comment("old").replace("old", "changed by hand")
    assert comment_status(edited, "old") is CommentStatus.HUMAN_EDITED
    assert comment_status("no marker", "old") is CommentStatus.UNMANAGED


def test_contract_drives_comments_and_tags_through_the_gate(contract: Path, tmp_path: Path) -> None:
    catalog = LocalCatalog(tmp_path / "wh")
    gate = CatalogGate(catalog, Role.DERIVED, descriptions_from_contract(contract, "events"))
    gate.ensure("main.sales.events", pa.schema([("id", pa.int64()), ("amount_cents", pa.int64())]))
    state = catalog.describe("main.sales.events")
    assert state is not None
    assert state.column("id").comment == managed_comment("Order id")  # type: ignore[union-attr]
    assert state.column("amount_cents").comment == managed_comment("Amount in cents")  # type: ignore[union-attr]
    assert state.column("_twg_offset").comment is not None  # engine-owned: built-in description
    assert state.properties["twg.contract.version"] == "1.2.0"
    assert state.properties["twg.owner"] == "team-orders"


def test_descriptions_for_unknown_columns_are_rejected_when_declaring_a_table() -> None:
    with pytest.raises(ConfigError, match="ghost"):
        DesiredTable.build(
            "c.s.t", pa.schema([("id", pa.int64())]), Role.DERIVED, descriptions={"ghost": "x"}
        )
