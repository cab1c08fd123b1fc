"""Fixtures for the Iceberg mirror, the read-only REST facade and read-back.

Everything is real: deltalake writes the Delta tables, pyiceberg's SqlCatalog holds the mirror, and
pyiceberg's RestCatalog reads through the facade served by a stdlib ThreadingHTTPServer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.iceberg_helpers import LAG_S
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.emulator.iceberg_rest import FacadeServer, IcebergRestFacade, serve_facade
from zerobus_orchestration.readback import IcebergEndpoint


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def mirror(warehouse: str) -> Iterator[IcebergMirror]:
    m = IcebergMirror(warehouse, lag_s=LAG_S, poll_interval_s=None)
    m.start()
    yield m
    m.stop()


@pytest.fixture
def facade_server(mirror: IcebergMirror) -> Iterator[FacadeServer]:
    server = serve_facade(IcebergRestFacade(mirror), "127.0.0.1", 0)
    yield server
    server.close()


@pytest.fixture
def endpoint(facade_server: FacadeServer) -> IcebergEndpoint:
    return IcebergEndpoint(uri=facade_server.base_url)


@pytest.fixture
def rest_catalog(facade_server: FacadeServer) -> Callable[[str], RestCatalog]:
    def make(catalog: str) -> RestCatalog:
        return RestCatalog("uc", uri=facade_server.base_url, warehouse=catalog, token="local-token")

    return make
