"""The Dagster quickstart: synthetic orders (primary raw) and daily totals computed from their read-back.

Shipped in the wheel, so it runs from an installed package as from a checkout (``dg`` is the
``dagster-dg-cli`` package)::

    dg dev -m dagster_defs.quickstart                      # UI on http://127.0.0.1:3000
    dg launch -m dagster_defs.quickstart --job zerobus_job

``raw/orders`` lands in ``main.raw.orders`` through Zerobus; its contract asset ``raw/orders__contract``
creates the table with commented columns first, and the blocking primary-raw checks on the contract stop
the write if the table is not eligible. ``analytics/daily_order_totals`` reads the orders back through
Iceberg and appends one row per day to ``main.analytics.daily_order_totals`` (role ``derived``).

With no Zerobus endpoint configured the resource starts the embedded emulator on ./.zerobus/warehouse
(override with ``ZEROBUS_WAREHOUSE``; every ``ZEROBUS_*`` variable applies). Production: set
``ZEROBUS_ENDPOINT``, ``ZEROBUS_WORKSPACE_URL``, ``ZEROBUS_CLIENT_ID`` and ``ZEROBUS_CLIENT_SECRET``.

It imports only names ``dagster_defs`` exports, as user code would. ``zerobus-orch demo`` runs it in
process (``dagster_defs.demo``).

No ``from __future__ import annotations``: Dagster validates ``context`` and config annotations.
"""

import os
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from dagster_defs import (
    ZerobusResource,
    build_contract_asset,
    build_zerobus_definitions,
    column_schema_from_arrow,
)

ORDERS_KEY = dg.AssetKey(["raw", "orders"])
DAILY_TOTALS_KEY = dg.AssetKey(["analytics", "daily_order_totals"])
ROWS_ENV = "QUICKSTART_ORDERS_ROWS"  # not ZEROBUS_*: that prefix is the core config's
DEFAULT_ROWS = 100_000

ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64()),
        pa.field("order_ts", pa.timestamp("us", tz="UTC")),
        pa.field("amount", pa.float64()),
        pa.field("currency", pa.string()),
        pa.field("status", pa.string()),
    ]
)
ORDERS_DESCRIPTIONS = {
    "order_id": "Unique order number, increasing with time.",
    "customer_id": "Customer who placed the order.",
    "order_ts": "When the order was placed (UTC).",
    "amount": "Order total in `currency`.",
    "currency": "ISO 4217 currency code.",
    "status": "Lifecycle state: placed, paid, shipped or cancelled.",
}
DAILY_TOTALS_SCHEMA = pa.schema(
    [pa.field("day", pa.date32()), pa.field("orders", pa.int64()), pa.field("revenue", pa.float64())]
)
DAILY_TOTALS_DESCRIPTIONS = {
    "day": "Calendar day (UTC) the orders were placed on.",
    "orders": "Number of orders that day.",
    "revenue": "Sum of the orders' amounts that day.",
}
_STATUSES = pa.array(["placed", "paid", "shipped", "cancelled"])
_EPOCH_US = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)


class OrdersConfig(dg.Config):
    rows: int = Field(
        default_factory=lambda: int(os.environ.get(ROWS_ENV, DEFAULT_ROWS)),
        description=f"How many synthetic orders to stream (default ${ROWS_ENV}, else {DEFAULT_ROWS}).",
    )
    batch_rows: int = Field(default=65_536, description="Rows per Arrow record batch.")


def order_batch(start: int, stop: int) -> pa.RecordBatch:
    """Deterministic synthetic orders ``[start, stop)``, computed column-wise (no Python loop per row)."""
    ids = pa.array(range(start, stop), pa.int64())
    # A multiplicative hash spreads the orders over 30 days; 603 us * 2**32 is just under 30 days.
    spread = pc.bit_wise_and(pc.multiply(ids, 2_654_435_761), 0xFFFFFFFF)
    ts = pc.add(pc.multiply(spread, 603), _EPOCH_US)
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pc.add(pc.bit_wise_and(pc.multiply(ids, 40_503), 4_095), 1),
            pc.cast(ts, pa.timestamp("us", tz="UTC")),
            pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 104_729), 65_535), pa.float64()), 100.0),
            pa.array(["EUR"] * (stop - start), pa.string()),
            pc.take(_STATUSES, pc.bit_wise_and(ids, 3)),
        ],
        schema=ORDERS_SCHEMA,
    )


def order_batches(rows: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, rows, batch_rows):
        yield order_batch(start, min(rows, start + batch_rows))


orders_contract = build_contract_asset(
    ORDERS_KEY, schema=ORDERS_SCHEMA, descriptions=ORDERS_DESCRIPTIONS, group_name="quickstart"
)


@dg.asset(
    key=ORDERS_KEY,
    deps=[orders_contract.key],
    group_name="quickstart",
    kinds=orders_contract.kinds,
    # The contract's table name, columns and comments: shown on this asset in the catalog UI, and what
    # the IO manager creates the table from when this asset runs without its contract asset.
    metadata=orders_contract.data_metadata,
    description="Synthetic orders streamed into main.raw.orders (primary raw).",
)
def orders(config: OrdersConfig) -> pa.RecordBatchReader:
    # A reader, not a Table: the IO manager streams batches as they are produced.
    return pa.RecordBatchReader.from_batches(ORDERS_SCHEMA, order_batches(config.rows, config.batch_rows))


@dg.asset(
    key=DAILY_TOTALS_KEY,
    ins={"orders": dg.AssetIn(key=ORDERS_KEY)},
    group_name="quickstart",
    kinds={"databricks", "delta"},
    metadata={
        "zerobus/role": "derived",
        "dagster/table_name": "main.analytics.daily_order_totals",
        "dagster/column_schema": column_schema_from_arrow(DAILY_TOTALS_SCHEMA, DAILY_TOTALS_DESCRIPTIONS),
    },
    description="Order count and revenue per day, from the orders read back through Iceberg.",
)
def daily_order_totals(orders: pa.Table) -> pa.Table:
    by_day = orders.append_column("day", pc.cast(orders["order_ts"], pa.date32()))
    totals = by_day.group_by("day").aggregate([("order_id", "count"), ("amount", "sum")])
    return pa.table(
        {
            "day": totals["day"],
            "orders": pc.cast(totals["order_id_count"], pa.int64()),
            "revenue": totals["amount_sum"],
        },
        schema=DAILY_TOTALS_SCHEMA,
    ).sort_by("day")


def build_definitions(resource: ZerobusResource | None = None) -> dg.Definitions:
    """The quickstart wired to ``resource`` (default: from ``ZEROBUS_*``, else the embedded emulator)."""
    return build_zerobus_definitions(
        assets=[orders, daily_order_totals],
        tables=[orders_contract],
        resource=resource or ZerobusResource(),
        catalog="main",
    )


defs = build_definitions()
