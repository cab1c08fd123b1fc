"""The read-only Iceberg REST facade, driven by pyiceberg's RestCatalog and by raw HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from tests.support.iceberg_helpers import nested_rows, write_delta
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.emulator.iceberg_rest import (
    ICEBERG_REST_BASE,
    SYNC_ROUTE,
    FacadeServer,
    IcebergRestFacade,
    serve_facade,
    sync_path,
)
from zerobus_orchestration.readback import SYNC_ROUTE as READBACK_SYNC_ROUTE

TABLE = "main.sales.orders"


def _http(method: str, url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    if method == "POST":
        request.data = b""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}


@pytest.fixture
def mirrored(warehouse: str, mirror: IcebergMirror) -> int:
    write_delta(warehouse, TABLE, nested_rows([0, 1, 2]))
    return mirror.sync_now(TABLE)


def test_config_sets_the_uc_prefix(facade_server: FacadeServer) -> None:
    status, body = _http("GET", f"{facade_server.base_url}/v1/config?warehouse=main")
    assert status == 200
    assert body["overrides"] == {"prefix": "catalogs/main"}

    status, body = _http("GET", f"{facade_server.base_url}/v1/config")
    assert status == 400
    assert body["error"]["type"] == "BadRequestException"  # type: ignore[index]


def test_list_and_load_through_rest_catalog(
    mirrored: int, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    catalog = rest_catalog("main")
    assert catalog.list_namespaces() == [("sales",)]
    assert catalog.list_tables("sales") == [("sales", "orders")]
    assert catalog.namespace_exists("sales")
    assert not catalog.namespace_exists("nope")
    assert catalog.table_exists("sales.orders")
    assert not catalog.table_exists("sales.nope")
    table = catalog.load_table("sales.orders")
    assert table.scan().to_arrow().num_rows == 3
    assert catalog.load_namespace_properties("sales") == {"exists": "true"}  # SqlCatalog's marker


def test_missing_table_and_namespace_are_404s(
    mirrored: int, rest_catalog: Callable[[str], RestCatalog], facade_server: FacadeServer
) -> None:
    catalog = rest_catalog("main")
    with pytest.raises(NoSuchTableError, match=r"main\.sales\.nope"):
        catalog.load_table("sales.nope")
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("nope")
    with pytest.raises(NoSuchTableError):
        rest_catalog("other").load_table("sales.orders")

    status, body = _http("GET", f"{facade_server.base_url}/v1/catalogs/main/namespaces/sales/tables/nope")
    assert status == 404
    assert body["error"] == {  # the Iceberg REST error model
        "message": "Table does not exist: main.sales.nope (not mirrored to Iceberg yet?)",
        "type": "NoSuchTableException",
        "code": 404,
    }
    status, body = _http("GET", f"{facade_server.base_url}/v1/catalogs/main/namespaces/nope")
    assert status == 404 and body["error"]["type"] == "NoSuchNamespaceException"  # type: ignore[index]


@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("POST", "/v1/catalogs/main/namespaces"),
        ("POST", "/v1/catalogs/main/namespaces/sales/tables"),
        ("POST", "/v1/catalogs/main/namespaces/sales/tables/orders"),
        ("DELETE", "/v1/catalogs/main/namespaces/sales/tables/orders"),
        ("DELETE", "/v1/catalogs/main/namespaces/sales"),
        ("POST", "/v1/catalogs/main/namespaces/sales/properties"),
        ("POST", "/v1/catalogs/main/namespaces/sales/register"),
    ],
)
def test_mutations_are_refused(mirrored: int, facade_server: FacadeServer, method: str, route: str) -> None:
    status, body = _http(method, facade_server.base_url + route)
    assert status == 405
    error = body["error"]
    assert isinstance(error, dict)
    assert error["type"] == "BadRequestException" and "read-only" in error["message"]


def test_rest_catalog_refuses_writes_client_side(
    mirrored: int, rest_catalog: Callable[[str], RestCatalog]
) -> None:
    # The config advertises read endpoints only, so pyiceberg never sends the write.
    with pytest.raises(NotImplementedError, match="does not support endpoint"):
        rest_catalog("main").drop_table("sales.orders")


def test_sync_endpoint_mirrors_now(
    warehouse: str, mirror: IcebergMirror, facade_server: FacadeServer
) -> None:
    write_delta(warehouse, TABLE, nested_rows([0]))
    version = write_delta(warehouse, TABLE, nested_rows([1]))
    status, body = _http("POST", facade_server.base_url + sync_path(TABLE))
    assert (status, body) == (200, {"table": TABLE, "delta_version": version})
    assert mirror.converted_version(TABLE) == version

    status, body = _http("POST", facade_server.base_url + sync_path("main.sales.absent"))
    assert status == 404 and body["error"]["type"] == "NoSuchTableException"  # type: ignore[index]
    status, body = _http("POST", facade_server.base_url + sync_path("not-three-parts"))
    assert status == 400
    status, _ = _http("GET", facade_server.base_url + sync_path(TABLE))
    assert status == 405
    assert SYNC_ROUTE == READBACK_SYNC_ROUTE  # read-back's client and the facade agree on the route


def test_hostile_names_stay_one_segment(mirror: IcebergMirror) -> None:
    facade = IcebergRestFacade(mirror)
    status, body = facade.handle(
        "GET", f"{ICEBERG_REST_BASE}/v1/catalogs/main/namespaces/a%2F..%2Fb/tables/x%0Ay", {}, {}, b""
    )
    assert status == 404
    assert "a/../b" in body["error"]["message"]
    status, _ = facade.handle("GET", "/somewhere/else", {}, {}, b"")
    assert status == 404


def test_bearer_token_is_enforced_when_configured(mirrored: int, mirror: IcebergMirror) -> None:
    server = serve_facade(IcebergRestFacade(mirror, token="s3cret"), "127.0.0.1", 0)
    try:
        status, body = _http("GET", f"{server.base_url}/v1/config?warehouse=main")
        assert status == 401 and body["error"]["type"] == "NotAuthorizedException"  # type: ignore[index]
        catalog = RestCatalog("uc", uri=server.base_url, warehouse="main", token="s3cret")
        assert catalog.load_table("sales.orders").scan().to_arrow().num_rows == 3
    finally:
        server.close()
