"""Catalog layer: the ``TableCatalog`` seam, pure reconcile plans, the DDL renderer and backends.

Import backends from their modules (``catalog.local.LocalCatalog``); this package re-exports the seam.
"""

from zerobus_orchestration.catalog.base import (
    Access,
    DesiredColumn,
    DesiredTable,
    LiveColumn,
    ProtocolInfo,
    ReconcileOutcome,
    TableCatalog,
    TableLocation,
    TableState,
    TableTags,
    VendedCredentials,
)

__all__ = [
    "Access",
    "DesiredColumn",
    "DesiredTable",
    "LiveColumn",
    "ProtocolInfo",
    "ReconcileOutcome",
    "TableCatalog",
    "TableLocation",
    "TableState",
    "TableTags",
    "VendedCredentials",
]
