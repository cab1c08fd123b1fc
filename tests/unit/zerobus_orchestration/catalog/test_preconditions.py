"""Primary-raw preconditions: pure predicates over TableState, and re-checks against the local backend."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.table import TableFeatures

from zerobus_orchestration.catalog.base import DesiredTable, ProtocolInfo, TableState
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.preconditions import (
    COLUMN_MAPPING,
    DELETION_VECTORS_DISABLED,
    ICEBERG_READS,
    PROTOCOL,
    REGISTERED,
    check_primary_raw,
    primary_raw_conditions,
    require_primary_raw,
    unmet,
)
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import PreconditionsUnmetError

T = "main.raw.events"

# A real UniForm table as Unity Catalog would describe it.
UNITY_OK = TableState(
    name=T,
    columns=(),
    properties={
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
        "delta.columnMapping.mode": "name",
        "delta.enableDeletionVectors": "false",
    },
    protocol=ProtocolInfo(2, 7, frozenset(), frozenset({"columnMapping", "icebergCompatV2", "appendOnly"})),
    table_id="uc-id",
    location="s3://bucket/t",
    version=12,
    registered=True,
)


def names_unmet(state: TableState | None) -> list[str]:
    return [c.name for c in unmet(primary_raw_conditions(state, T))]


def with_props(state: TableState, **changes: str | None) -> TableState:
    props = dict(state.properties)
    for key, value in changes.items():
        real = key.replace("__", ".")
        if value is None:
            props.pop(real, None)
        else:
            props[real] = value
    return replace(state, properties=props)


def test_real_uniform_table_meets_every_condition() -> None:
    conditions = primary_raw_conditions(UNITY_OK, T)
    assert [c.name for c in conditions] == [
        REGISTERED,
        ICEBERG_READS,
        COLUMN_MAPPING,
        PROTOCOL,
        DELETION_VECTORS_DISABLED,
    ]
    assert all(c.ok for c in conditions)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (replace(UNITY_OK, registered=False), [REGISTERED]),
        (with_props(UNITY_OK, delta__enableIcebergCompatV2="false"), [ICEBERG_READS]),
        (with_props(UNITY_OK, delta__universalFormat__enabledFormats=None), [ICEBERG_READS]),
        (with_props(UNITY_OK, delta__columnMapping__mode="none"), [COLUMN_MAPPING]),
        (replace(UNITY_OK, protocol=ProtocolInfo(1, 4, frozenset(), frozenset())), [ICEBERG_READS, PROTOCOL]),
        (
            replace(UNITY_OK, protocol=ProtocolInfo(2, 7, frozenset(), frozenset({"icebergCompatV2"}))),
            [PROTOCOL],
        ),
        (with_props(UNITY_OK, delta__enableDeletionVectors="true"), [DELETION_VECTORS_DISABLED]),
        (
            replace(
                UNITY_OK,
                protocol=ProtocolInfo(
                    3,
                    7,
                    frozenset({"deletionVectors"}),
                    UNITY_OK.protocol.writer_features | {"deletionVectors"},
                ),
            ),
            [DELETION_VECTORS_DISABLED],
        ),
        (None, [REGISTERED]),
    ],
    ids=[
        "unregistered",
        "compat-off",
        "no-formats",
        "no-mapping",
        "old-protocol",
        "missing-feature",
        "dv-property",
        "dv-feature",
        "absent",
    ],
)
def test_each_unmet_condition_is_named(state: TableState | None, expected: list[str]) -> None:
    assert names_unmet(state) == expected


def test_emulated_mode_answers_mapping_and_uniform_but_never_deletion_vectors() -> None:
    embedded = replace(
        with_props(UNITY_OK, delta__columnMapping__mode=None),
        protocol=ProtocolInfo(1, 2),
        emulated=frozenset({"columnMapping", "uniform"}),
    )
    conditions = {c.name: c for c in primary_raw_conditions(embedded, T)}
    assert all(c.ok for c in conditions.values())
    assert "emulated" in conditions[COLUMN_MAPPING].detail and "emulated" in conditions[ICEBERG_READS].detail
    dv = with_props(embedded, delta__enableDeletionVectors="true")
    assert names_unmet(dv) == [DELETION_VECTORS_DISABLED]
    claims = replace(embedded, protocol=ProtocolInfo(2, 7, frozenset(), frozenset({"icebergCompatV2"})))
    assert names_unmet(claims) == [PROTOCOL]


def test_several_unmet_conditions_are_all_returned() -> None:
    bad = replace(
        with_props(UNITY_OK, delta__enableDeletionVectors="true", delta__columnMapping__mode=None),
        registered=False,
    )
    assert names_unmet(bad) == [REGISTERED, COLUMN_MAPPING, DELETION_VECTORS_DISABLED]


# --- against the local backend: every call re-reads the table -------------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    cat = LocalCatalog(tmp_path / "wh")
    cat.reconcile(T, DesiredTable.build(T, pa.schema([pa.field("id", pa.int64())]), Role.PRIMARY_RAW))
    return cat


def test_primary_raw_table_is_created_eligible(catalog: LocalCatalog) -> None:
    conditions = require_primary_raw(catalog, T)
    assert all(c.ok for c in conditions)


def test_deletion_vectors_property_is_refused_on_the_next_call(catalog: LocalCatalog) -> None:
    assert not unmet(check_primary_raw(catalog, T))
    DeltaTable(catalog.location(T)).alter.set_table_properties(
        {"delta.enableDeletionVectors": "true"}, raise_if_not_exists=False
    )
    with pytest.raises(PreconditionsUnmetError) as info:
        require_primary_raw(catalog, T)
    assert info.value.unmet == (DELETION_VECTORS_DISABLED,)
    assert "delta.enableDeletionVectors=true" in str(info.value)


def test_active_deletion_vectors_feature_is_refused(catalog: LocalCatalog) -> None:
    DeltaTable(catalog.location(T)).alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    found = unmet(check_primary_raw(catalog, T))
    assert [c.name for c in found] == [DELETION_VECTORS_DISABLED]
    assert "deletionVectors feature is active" in found[0].detail


def test_unregistered_and_iceberg_off_are_named(catalog: LocalCatalog, tmp_path: Path) -> None:
    other = "main.raw.outside"
    DeltaTable.create(catalog.location(other), pa.schema([pa.field("id", pa.int64())]))
    with pytest.raises(PreconditionsUnmetError) as info:
        require_primary_raw(catalog, other)
    # Unregistered, so nothing is known to be emulated: the real UniForm protocol is required too.
    assert info.value.unmet == (REGISTERED, ICEBERG_READS, COLUMN_MAPPING, PROTOCOL)
    DeltaTable(catalog.location(T)).alter.set_table_properties(
        {"delta.enableIcebergCompatV2": "false"}, raise_if_not_exists=False
    )
    assert [c.name for c in unmet(check_primary_raw(catalog, T))] == [ICEBERG_READS]


def test_missing_table_is_unmet(catalog: LocalCatalog) -> None:
    with pytest.raises(PreconditionsUnmetError, match="does not exist"):
        require_primary_raw(catalog, "main.raw.nothing")
