"""How read-back authenticates to an Iceberg REST catalog: a bearer header asked for on every request.

Production reads Unity Catalog's Iceberg REST endpoint as the service principal (OAuth M2M). A token
copied into the catalog's properties would expire under a long-lived sensor or trigger, so pyiceberg
gets an ``AuthManager`` that asks ``databricks-sdk`` for the header per request: the SDK caches the
token and refreshes it before it expires. The secret stays inside the SDK's ``Config``; no property of
the pyiceberg catalog holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import SecretStr
from pyiceberg.catalog.rest.auth import AuthManager

from zerobus_orchestration.errors import ConfigError

HeaderFactory = Callable[[], str]
"""Returns the ``Authorization`` header value (``"Bearer ..."``), fresh enough to send now."""

AUTH_MANAGER_IMPL = f"{__name__}.HeaderAuthManager"


class HeaderAuthManager(AuthManager):
    """pyiceberg ``AuthManager`` over a header factory (pyiceberg's ``auth.type = custom``)."""

    def __init__(self, header: HeaderFactory) -> None:
        self._header = header

    def auth_header(self) -> str:
        return self._header()


def rest_auth_properties(header: HeaderFactory) -> dict[str, object]:
    """The ``auth`` property of a pyiceberg ``RestCatalog`` that uses ``header`` on every request."""
    return {"type": "custom", "impl": AUTH_MANAGER_IMPL, "custom": {"header": header}}


class DatabricksOAuthHeader:
    """A refreshing service-principal bearer header from ``databricks-sdk`` (OAuth M2M).

    The SDK's ``Config`` is built on first use (it discovers the workspace's OIDC endpoints, a network
    call), never at construction, so building a read-back service stays offline.
    """

    def __init__(self, workspace_url: str, client_id: str, client_secret: SecretStr) -> None:
        if not workspace_url or not client_id:
            raise ConfigError(
                "read-back through Unity Catalog's Iceberg REST endpoint needs zerobus.workspace_url, "
                "zerobus.client_id and zerobus.client_secret (the service principal), or "
                "zerobus.readback.token"
            )
        self._workspace_url = workspace_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._lock = threading.Lock()
        self._authenticate: Callable[[], dict[str, str]] | None = None

    def __repr__(self) -> str:  # never the secret
        return f"DatabricksOAuthHeader({self._workspace_url!r}, client_id={self._client_id!r})"

    def __call__(self) -> str:
        with self._lock:
            if self._authenticate is None:
                from databricks.sdk.config import Config

                config = Config(
                    host=self._workspace_url,
                    client_id=self._client_id,
                    client_secret=self._client_secret.get_secret_value(),
                    auth_type="oauth-m2m",
                )
                self._authenticate = config.authenticate
            authenticate = self._authenticate
        return authenticate()["Authorization"]
