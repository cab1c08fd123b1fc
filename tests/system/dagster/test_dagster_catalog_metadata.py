"""What the Dagster catalog shows on a Zerobus table's data asset, and nested columns in ``column_schema=``."""

import dagster as dg
import pyarrow as pa

from dagster_defs import ZerobusResource, build_contract_asset, column_schema_from_arrow
from dagster_defs.quickstart import DAILY_TOTALS_KEY, ORDERS_KEY, ORDERS_SCHEMA, build_definitions
from zerobus_orchestration.catalog.base import TableState
from zerobus_orchestration.config import ZerobusConfig

PROFILES_KEY = dg.AssetKey(["raw", "profiles"])
PROFILES_COLUMNS = dg.TableSchema(
    columns=[
        dg.TableColumn("user_id", "BIGINT", "User.", dg.TableColumnConstraints(nullable=False)),
        dg.TableColumn("tags", "ARRAY<STRING>", "Free-form labels."),
        dg.TableColumn("address", "STRUCT<city: STRING, zip: STRING, lines: ARRAY<STRING>>"),
        dg.TableColumn("scores", "MAP<STRING, DOUBLE>"),
        dg.TableColumn("visits", "ARRAY<STRUCT<day: DATE, pages: INT>>"),
    ]
)
profiles_contract = build_contract_asset(PROFILES_KEY, column_schema=PROFILES_COLUMNS)
PROFILES = pa.schema(
    [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("tags", pa.list_(pa.string())),
        pa.field(
            "address",
            pa.struct([("city", pa.string()), ("zip", pa.string()), ("lines", pa.list_(pa.string()))]),
        ),
        pa.field("scores", pa.map_(pa.string(), pa.float64())),
        pa.field("visits", pa.list_(pa.struct([("day", pa.date32()), ("pages", pa.int32())]))),
    ]
)
ROWS = [
    {
        "user_id": 1,
        "tags": ["a", "b"],
        "address": {"city": "Lyon", "zip": "69001", "lines": ["1 rue X"]},
        "scores": [("x", 1.5)],
        "visits": [{"day": None, "pages": 3}],
    },
    # A NULL array of structs reads back NULL, not [] (pyiceberg alone rebuilds it as []).
    {"user_id": 2, "tags": None, "address": None, "scores": None, "visits": None},
    {"user_id": 3, "tags": [], "address": None, "scores": None, "visits": []},
]


@dg.asset(
    key=PROFILES_KEY,
    deps=[profiles_contract.key],
    kinds=profiles_contract.kinds,
    metadata=profiles_contract.data_metadata,
)
def profiles() -> pa.Table:
    return pa.Table.from_pylist(ROWS, schema=PROFILES)


def _shown(node: dg.AssetSpec | object) -> tuple[set[str], str, dict[str, str]]:
    metadata = node.metadata  # type: ignore[attr-defined]
    columns = {c.name: c.type for c in metadata["dagster/column_schema"].columns}
    return set(node.kinds), metadata["dagster/table_name"], columns  # type: ignore[attr-defined]


def test_the_quickstart_data_assets_show_table_columns_and_kinds(zb_config: ZerobusConfig) -> None:
    graph = build_definitions(ZerobusResource.from_config(zb_config)).resolve_asset_graph()

    kinds, table, columns = _shown(graph.get(ORDERS_KEY))
    assert kinds == {"databricks", "delta"}
    assert table == "main.raw.orders"
    assert columns == {c.name: c.type for c in column_schema_from_arrow(ORDERS_SCHEMA).columns}
    assert columns["order_ts"] == "TIMESTAMP"
    kinds, table, columns = _shown(graph.get(DAILY_TOTALS_KEY))
    assert kinds == {"databricks", "delta"}
    assert table == "main.analytics.daily_order_totals"
    assert columns == {"day": "DATE", "orders": "BIGINT", "revenue": "DOUBLE"}


def test_column_schema_declares_arrays_structs_and_maps(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    # The data asset alone: its declared column schema is the contract the table is created from.
    assert dg.materialize([profiles], resources=resources).success
    state = zerobus.runtime.catalog.describe("main.raw.profiles")
    assert isinstance(state, TableState)
    live = {c.name: c.delta_type for c in state.columns if not c.name.startswith("_twg_")}
    assert live == {c.name: c.type for c in PROFILES_COLUMNS.columns}
    assert dg.materialize(profiles_contract.definitions, resources=resources).success

    rt = zerobus.runtime
    assert rt.verify("main.raw.profiles", source="raw/profiles").verified
    back = rt.read_rows("main.raw.profiles").select(PROFILES.names).sort_by("user_id")
    assert back.cast(PROFILES).to_pylist() == pa.Table.from_pylist(ROWS, schema=PROFILES).to_pylist()
