"""The emulator of one warehouse, started in this process from a ``ZerobusConfig``.

What the embedded mode runs in a step or task process, and what the shared daemon runs in its own:
the warehouse made absolute once, the write-ahead log and Iceberg catalog in the local state folder
(SQLite and the fsync'd WAL need local disk, even for an ``s3://`` warehouse), and the warehouse's own
client secret instead of the well-known default. Credential vending is handed in (``credentials``):
vending is catalog code, which the emulator does not import.
"""

from __future__ import annotations

import logging

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.iceberg_mirror import ICEBERG_DB_NAME
from zerobus_orchestration.emulator.iceberg_rest import TableCredentialSource
from zerobus_orchestration.emulator.private import with_warehouse_secret
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.locations import absolute_state_dir, absolute_warehouse
from zerobus_orchestration.storage import config_storage_options

log = logging.getLogger(__name__)


def start_emulator(config: ZerobusConfig, credentials: TableCredentialSource | None = None) -> Emulator:
    """The emulator of ``config.warehouse``, serving; ``credentials`` vends Iceberg readers' keys."""
    state = absolute_state_dir(config.state_path)
    warehouse = absolute_warehouse(config.warehouse)
    emulator = Emulator(
        warehouse,
        with_warehouse_secret(config).emulator,  # never the well-known default secret
        storage_options=config_storage_options(config) or None,
        wal_dir=str(state / "wal"),
        iceberg_db=str(state / ICEBERG_DB_NAME),
        credentials=credentials,
        catalogs=config.catalog.local_catalogs,  # the local Unity Catalog knows what the local backend does
    )
    emulator.start()
    log.info("embedded Zerobus emulator at %s (warehouse %s)", emulator.endpoint, config.warehouse)
    return emulator
