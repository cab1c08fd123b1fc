"""Dagster quickstart definitions: ``dagster dev -m examples.dagster_quickstart.definitions``.

With no Zerobus endpoint configured the resource starts the embedded emulator on ./.zerobus/warehouse
(override with ``ZEROBUS_WAREHOUSE``; every ``ZEROBUS_*`` variable applies). Production: set
``ZEROBUS_ENDPOINT``, ``ZEROBUS_WORKSPACE_URL``, ``ZEROBUS_CLIENT_ID`` and ``ZEROBUS_CLIENT_SECRET``.
"""

import dagster as dg

from dagster_defs import ZerobusResource, build_zerobus_definitions
from examples.dagster_quickstart.assets import daily_order_totals, orders, orders_contract


def build_definitions(resource: ZerobusResource | None = None) -> dg.Definitions:
    """The quickstart wired to ``resource`` (default: from ``ZEROBUS_*``, else the embedded emulator)."""
    return build_zerobus_definitions(
        assets=[orders, daily_order_totals],
        tables=[orders_contract],
        resource=resource or ZerobusResource(),
        catalog="main",
    )


defs = build_definitions()
