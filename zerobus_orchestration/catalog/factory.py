"""The one builder of the configured catalog backend, shared by the runtime, read-back and the CLI."""

from __future__ import annotations

import os

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import CatalogBackend, ZerobusConfig
from zerobus_orchestration.locations import absolute_state_dir, absolute_warehouse
from zerobus_orchestration.storage import config_storage_options


def catalog_from_config(cfg: ZerobusConfig) -> TableCatalog:
    """The configured backend: ``local`` (warehouse folder) or ``unity`` (databricks-sdk).

    The one builder: the runtime, ``plan`` and ``check`` all open the same catalog (for ``local``, the
    registry at ``<state_dir>/catalog.sqlite``, which an ``s3://`` warehouse needs on local disk).
    """
    if cfg.catalog.backend is CatalogBackend.UNITY:
        from zerobus_orchestration.catalog.unity import UnityCatalog

        return UnityCatalog.from_config(cfg)
    from zerobus_orchestration.catalog.local import REGISTRY_FILE, LocalCatalog

    registry = os.path.join(absolute_state_dir(cfg.state_path), REGISTRY_FILE)
    return LocalCatalog(
        absolute_warehouse(cfg.warehouse),
        storage_options=config_storage_options(cfg),
        registry_path=registry,
        catalogs=cfg.catalog.local_catalogs,
    )
