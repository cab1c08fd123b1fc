"""Read-only Iceberg REST catalog facade over the Iceberg mirror, shaped like Unity Catalog's.

Unity Catalog serves Iceberg REST at ``<workspace>/api/2.1/unity-catalog/iceberg-rest`` with the catalog
name as the ``warehouse`` and ``catalogs/<catalog>`` as the path prefix; namespace = schema. Serving the
same shape locally means read-back runs one code path (pyiceberg ``RestCatalog``) in both modes:

    RestCatalog("uc", uri=f"{base}/api/2.1/unity-catalog/iceberg-rest", warehouse="<catalog>")
    .load_table("<schema>.<table>")

Routes (below ``ICEBERG_REST_BASE``):

    GET  /v1/config?warehouse=<catalog>
    GET  /v1/catalogs/<catalog>/namespaces                           list schemas
    GET  /v1/catalogs/<catalog>/namespaces/<schema>                  load namespace (HEAD: exists)
    GET  /v1/catalogs/<catalog>/namespaces/<schema>/tables           list tables
    GET  /v1/catalogs/<catalog>/namespaces/<schema>/tables/<table>   load table (HEAD: exists)
    GET  /v1/catalogs/<catalog>/namespaces/<schema>/tables/<table>/credentials
    POST /zerobus/v1/sync/<catalog.schema.table>                     non-standard: mirror now

Everything else that would change the catalog is answered 405 (read-only). Error bodies follow the
Iceberg REST spec: ``{"error": {"message", "type", "code"}}``.

Credentials: without a credential source, the load-table ``config`` carries the mirror's own FileIO
properties (the warehouse's keys). With one (``credentials=``, e.g. a ``storage.CredentialCache`` over an
``S3CredentialVendor``), it carries short-lived READ credentials for that table only, with their expiry
in ``s3.session-token-expires-at-ms``, and never the warehouse's keys. Every load asks the source again,
so a reader that reloads the table (read-back polls do) gets fresh keys once the cached ones near expiry.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.storage import Access, VendedCredentials, pyiceberg_properties, reveal
from zerobus_orchestration.tables import TableName

log = logging.getLogger(__name__)

ICEBERG_REST_BASE: Final = "/api/2.1/unity-catalog/iceberg-rest"
SYNC_ROUTE: Final = "/zerobus/v1/sync/"
NAMESPACE_SEPARATOR: Final = "\x1f"  # the Iceberg REST default for multi-level namespaces

# Advertised so pyiceberg refuses writes client-side instead of sending them.
READ_ENDPOINTS: Final = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
)

Response = tuple[int, dict[str, Any]]

# The Iceberg REST property carrying a vended S3 session's expiry (what Iceberg clients refresh on).
EXPIRES_AT_MS: Final = "s3.session-token-expires-at-ms"
_KEY_PROPERTIES: Final = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")


class TableCredentialSource(Protocol):
    """Short-lived credentials per (table, access); ``storage.CredentialCache`` is one."""

    def get(self, table: str, access: Access) -> VendedCredentials: ...


def vended_io_properties(base: Mapping[str, str], credentials: VendedCredentials) -> dict[str, str]:
    """FileIO properties for a reader: ``base`` (endpoint, region) without its keys, plus the vended ones."""
    properties = {k: v for k, v in base.items() if k not in _KEY_PROPERTIES}
    properties.update(pyiceberg_properties(reveal(credentials.storage_options)))
    properties[EXPIRES_AT_MS] = str(int(credentials.expires_at.timestamp() * 1000))
    return properties


def error_body(status: int, error_type: str, message: str) -> Response:
    return status, {"error": {"message": message, "type": error_type, "code": status}}


def sync_path(full_name: str) -> str:
    """The path (below ``ICEBERG_REST_BASE``) of the non-standard "mirror now" endpoint for a table."""
    return SYNC_ROUTE + quote(full_name, safe="")


class IcebergRestFacade:
    """Answers Iceberg REST requests from the mirror's catalog; stateless apart from the mirror.

    ``handle`` takes the raw (still percent-encoded) request path without the query string, so a name
    containing ``/`` stays one segment. With ``token`` set, requests must carry ``Bearer <token>``.
    """

    def __init__(
        self,
        mirror: IcebergMirror,
        *,
        token: str | None = None,
        credentials: TableCredentialSource | None = None,
    ) -> None:
        self.mirror = mirror
        self._token = token
        self.credentials = credentials

    def handle(
        self,
        method: str,
        path: str,
        query: Mapping[str, list[str]],
        headers: Mapping[str, str],
        body: bytes,
    ) -> Response:
        method = method.upper()
        if not path.startswith(ICEBERG_REST_BASE + "/"):
            return error_body(404, "NoSuchResourceException", f"no Iceberg REST route for {path}")
        if self._token is not None and not self._authorized(headers):
            return error_body(401, "NotAuthorizedException", "missing or invalid bearer token")
        route = path[len(ICEBERG_REST_BASE) :]
        try:
            if route.startswith(SYNC_ROUTE):
                return self._sync(method, unquote(route[len(SYNC_ROUTE) :]))
            segments = [unquote(s) for s in route.strip("/").split("/")]
            return self._route(method, segments, query)
        except Exception as exc:  # a facade bug must answer 500, not kill the server thread
            log.exception("iceberg REST facade failed on %s %s", method, path)
            return error_body(500, "ServiceFailureException", f"{type(exc).__name__}: {exc}")

    # ----------------------------------------------------------------- routing

    def _route(self, method: str, segments: list[str], query: Mapping[str, list[str]]) -> Response:
        where = "/" + "/".join(segments)
        if segments == ["v1", "config"]:
            return self._only_get(method, where, lambda: self._config(query))
        if len(segments) < 4 or segments[:2] != ["v1", "catalogs"] or segments[3] != "namespaces":
            return error_body(404, "NoSuchResourceException", f"no Iceberg REST route for {where}")
        catalog, rest = segments[2], segments[4:]
        if not rest:
            return self._only_get(method, where, lambda: self._list_namespaces(catalog, query))
        namespace = tuple(rest[0].split(NAMESPACE_SEPARATOR))
        if len(rest) == 1:
            return self._read(method, where, lambda: self._load_namespace(catalog, namespace))
        if rest[1:] == ["tables"]:
            return self._only_get(method, where, lambda: self._list_tables(catalog, namespace))
        if len(rest) == 3 and rest[1] == "tables":
            return self._read(method, where, lambda: self._load_table(catalog, namespace, rest[2]))
        if len(rest) == 4 and rest[1] == "tables" and rest[3] == "credentials":
            return self._only_get(method, where, lambda: self._credentials(catalog, namespace, rest[2]))
        return _read_only(method, where)

    def _only_get(self, method: str, where: str, action: Callable[[], Response]) -> Response:
        if method != "GET":
            return _read_only(method, where)
        return action()

    def _read(self, method: str, where: str, action: Callable[[], Response]) -> Response:
        """GET returns the resource; HEAD only whether it exists."""
        if method not in ("GET", "HEAD"):
            return _read_only(method, where)
        status, payload = action()
        if method == "HEAD":
            return (204 if status == 200 else status), {}
        return status, payload

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        lowered = {k.lower(): v for k, v in headers.items()}
        given = lowered.get("authorization", "").encode()
        return hmac.compare_digest(given, f"Bearer {self._token}".encode())  # no timing oracle

    # ----------------------------------------------------------------- handlers

    def _config(self, query: Mapping[str, list[str]]) -> Response:
        warehouse = (query.get("warehouse") or [""])[0]
        if not warehouse:
            return error_body(
                400,
                "BadRequestException",
                "the warehouse query parameter is required: pass warehouse=<catalog> to RestCatalog",
            )
        return 200, {
            "defaults": {},
            "overrides": {"prefix": f"catalogs/{warehouse}"},
            "endpoints": list(READ_ENDPOINTS),
        }

    def _known_catalog(self, catalog: str) -> bool:
        # Checked first so arbitrary names in URLs do not create SqlCatalog engines.
        return catalog in self.mirror.catalog_names()

    def _list_namespaces(self, catalog: str, query: Mapping[str, list[str]]) -> Response:
        parent = (query.get("parent") or [""])[0]
        if not self._known_catalog(catalog):
            if parent:
                return _no_such_namespace(catalog, tuple(parent.split(NAMESPACE_SEPARATOR)))
            return 200, {"namespaces": []}
        iceberg = self.mirror.iceberg_catalog(catalog)
        if parent:
            parent_ns = tuple(parent.split(NAMESPACE_SEPARATOR))
            try:
                children = iceberg.list_namespaces(parent_ns)
            except NoSuchNamespaceError:
                return _no_such_namespace(catalog, parent_ns)
            return 200, {"namespaces": [list(ns) for ns in children]}
        return 200, {"namespaces": [list(ns) for ns in iceberg.list_namespaces()]}

    def _load_namespace(self, catalog: str, namespace: tuple[str, ...]) -> Response:
        if not self._known_catalog(catalog):
            return _no_such_namespace(catalog, namespace)
        try:
            properties = self.mirror.iceberg_catalog(catalog).load_namespace_properties(namespace)
        except NoSuchNamespaceError:
            return _no_such_namespace(catalog, namespace)
        return 200, {"namespace": list(namespace), "properties": dict(properties)}

    def _list_tables(self, catalog: str, namespace: tuple[str, ...]) -> Response:
        if not self._known_catalog(catalog):
            return _no_such_namespace(catalog, namespace)
        try:
            identifiers = self.mirror.iceberg_catalog(catalog).list_tables(namespace)
        except NoSuchNamespaceError:
            return _no_such_namespace(catalog, namespace)
        return 200, {
            "identifiers": [{"namespace": list(ident[:-1]), "name": ident[-1]} for ident in identifiers]
        }

    def _load_table(self, catalog: str, namespace: tuple[str, ...], table: str) -> Response:
        if not self._known_catalog(catalog):
            return _no_such_table(catalog, namespace, table)
        try:
            loaded = self.mirror.iceberg_catalog(catalog).load_table((*namespace, table))
        except (NoSuchTableError, NoSuchNamespaceError):
            return _no_such_table(catalog, namespace, table)
        try:
            config = self._reader_io_properties(".".join((catalog, *namespace, table)))
        except CatalogError as exc:
            return error_body(403, "ForbiddenException", str(exc))
        return 200, {
            "metadata-location": loaded.metadata_location,
            "metadata": json.loads(loaded.metadata.model_dump_json()),
            "config": config,
        }

    def _reader_io_properties(self, full_name: str) -> dict[str, str]:
        """What a reader of ``full_name`` gets: vended READ credentials when a source is set."""
        if self.credentials is None:
            return self.mirror.io_properties
        name = TableName.parse(full_name).full_name
        return vended_io_properties(self.mirror.io_properties, self.credentials.get(name, Access.READ))

    def _credentials(self, catalog: str, namespace: tuple[str, ...], table: str) -> Response:
        status, loaded = self._load_table(catalog, namespace, table)
        if status != 200:
            return status, loaded
        credential = {"prefix": loaded["metadata"]["location"], "config": loaded["config"]}
        return 200, {"storage-credentials": [credential]}

    def _sync(self, method: str, full_name: str) -> Response:
        if method != "POST":
            return error_body(405, "BadRequestException", f"use POST {SYNC_ROUTE}<catalog.schema.table>")
        try:
            version = self.mirror.sync_now(full_name)
        except ConfigError as exc:
            return error_body(400, "BadRequestException", str(exc))
        except Exception as exc:
            if _is_missing_delta_table(exc):
                return error_body(404, "NoSuchTableException", f"no Delta table for {full_name}: {exc}")
            return error_body(500, "ServiceFailureException", f"mirroring {full_name} failed: {exc}")
        return 200, {"table": full_name, "delta_version": version}


def _read_only(method: str, where: str) -> Response:
    return error_body(
        405,
        "BadRequestException",
        f"{method} {where}: this Iceberg REST catalog is read-only (the Iceberg mirror of Delta tables "
        "written through Zerobus); write through Zerobus instead",
    )


def _no_such_namespace(catalog: str, namespace: tuple[str, ...]) -> Response:
    return error_body(
        404, "NoSuchNamespaceException", f"Namespace does not exist: {catalog}.{'.'.join(namespace)}"
    )


def _no_such_table(catalog: str, namespace: tuple[str, ...], table: str) -> Response:
    return error_body(
        404,
        "NoSuchTableException",
        f"Table does not exist: {catalog}.{'.'.join(namespace)}.{table} (not mirrored to Iceberg yet?)",
    )


def _is_missing_delta_table(exc: BaseException) -> bool:
    return type(exc).__name__ == "TableNotFoundError" or "no log files" in str(exc).lower()


# --------------------------------------------------------------------- stdlib HTTP server


class FacadeServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer serving one facade from a daemon thread; ``close()`` stops and joins it."""

    daemon_threads = True

    def __init__(self, facade: IcebergRestFacade, host: str, port: int) -> None:
        self.facade = facade
        super().__init__((host, port), _FacadeHandler)
        # A short poll interval keeps close() fast; shutdown() waits up to one interval.
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="iceberg-rest-facade", daemon=True
        )

    @property
    def base_url(self) -> str:
        """The Iceberg REST ``uri`` for pyiceberg's RestCatalog."""
        host, port = self.server_address[0], self.server_address[1]
        return f"http://{host!s}:{port}{ICEBERG_REST_BASE}"

    def start(self) -> FacadeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(10.0)


class _FacadeHandler(BaseHTTPRequestHandler):
    server: FacadeServer
    protocol_version = "HTTP/1.1"

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.server.facade.handle(
            self.command, split.path, parse_qs(split.query), dict(self.headers.items()), body
        )
        data = b"" if status == 204 or self.command == "HEAD" else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("iceberg REST facade: " + format, *args)


def serve_facade(facade: IcebergRestFacade, host: str = "127.0.0.1", port: int = 0) -> FacadeServer:
    """Serve ``facade`` on ``host:port`` (0 picks a free port) from a background thread.

    Returns the running server; ``server.base_url`` is the RestCatalog ``uri``; ``server.close()`` stops it.
    """
    return FacadeServer(facade, host, port).start()
