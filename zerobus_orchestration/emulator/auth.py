"""OAuth client-credentials tokens for the emulator, scoped to tables like the Databricks ones.

The SDK posts to ``<unity_catalog_url>/oidc/v1/token`` with HTTP Basic client credentials and an
``authorization_details`` JSON list whose ``TABLE`` entry names the table it will write. A token from
a request without table details is a workspace token: it may write any table. Tokens live in memory
only: a restarted emulator forgets them, and the SDK fetches a new one after the UNAUTHENTICATED answer.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from pydantic import SecretStr

from zerobus_orchestration.emulator.errors import AuthFailure, TokenRequestError


@dataclass(frozen=True)
class IssuedToken:
    tables: frozenset[str] | None  # None: any table
    expires_at: float


def tables_in_authorization_details(raw: str) -> frozenset[str]:
    """Tables granted MODIFY in an ``authorization_details`` JSON list (case-insensitive names)."""
    try:
        details = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TokenRequestError(400, "invalid_request", f"authorization_details is not JSON: {exc}") from exc
    if not isinstance(details, list):
        raise TokenRequestError(400, "invalid_request", "authorization_details must be a JSON list")
    tables = set()
    for entry in details:
        if not isinstance(entry, dict) or str(entry.get("object_type", "")).upper() != "TABLE":
            continue
        privileges = {str(p).upper() for p in entry.get("privileges", [])}
        if "MODIFY" in privileges and entry.get("object_full_path"):
            tables.add(str(entry["object_full_path"]).lower())
    return frozenset(tables)


class TokenIssuer:
    def __init__(self, client_id: str, client_secret: SecretStr, ttl_s: float) -> None:
        self._client_id = client_id
        self._client_secret = client_secret
        self._ttl_s = ttl_s
        self._tokens: dict[str, IssuedToken] = {}
        self._lock = threading.Lock()

    def issue(self, tables: frozenset[str] | None = None, ttl_s: float | None = None) -> str:
        """A new bearer token for ``tables`` (None: any table) valid for ``ttl_s`` (default configured)."""
        token = "zbemu-" + secrets.token_urlsafe(24)
        expires = time.monotonic() + (self._ttl_s if ttl_s is None else ttl_s)
        scope = None if tables is None else frozenset(t.lower() for t in tables)
        with self._lock:
            now = time.monotonic()  # forget expired tokens, so a long-lived emulator does not grow
            self._tokens = {k: v for k, v in self._tokens.items() if v.expires_at > now}
            self._tokens[token] = IssuedToken(scope, expires)
        return token

    def token_response(self, authorization: str | None, body: bytes) -> dict[str, object]:
        """Answer a ``POST /oidc/v1/token``; raises ``TokenRequestError`` with the HTTP status."""
        self._check_client(authorization)
        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "client_credentials":
            raise TokenRequestError(400, "unsupported_grant_type", f"grant_type {form.get('grant_type')!r}")
        details = form.get("authorization_details")
        tables = tables_in_authorization_details(details) if details else None
        token = self.issue(tables)
        return {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(self._ttl_s),
            "scope": form.get("scope", "all-apis"),
        }

    def _check_client(self, authorization: str | None) -> None:
        if not authorization or not authorization.lower().startswith("basic "):
            raise TokenRequestError(401, "invalid_client", "HTTP Basic client credentials required")
        try:
            client_id, _, secret = base64.b64decode(authorization[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError) as exc:
            raise TokenRequestError(401, "invalid_client", "malformed Basic credentials") from exc
        good_id = hmac.compare_digest(client_id.encode(), self._client_id.encode())
        good_secret = hmac.compare_digest(secret.encode(), self._client_secret.get_secret_value().encode())
        if not (good_id and good_secret):
            raise TokenRequestError(401, "invalid_client", "unknown client id or wrong secret")

    def check_http(self, authorization: str | None) -> None:
        """Admit an HTTP request (control routes, Iceberg REST): a live bearer token this emulator
        issued, or HTTP Basic client credentials. Raises ``TokenRequestError`` (401) otherwise."""
        if authorization and authorization.lower().startswith("basic "):
            self._check_client(authorization)
            return
        if not authorization or not authorization.lower().startswith("bearer "):
            raise TokenRequestError(
                401, "unauthorized", "credentials required: Authorization: Bearer <token> or Basic client"
            )
        with self._lock:
            issued = self._tokens.get(authorization[7:].strip())
        if issued is None or issued.expires_at <= time.monotonic():
            raise TokenRequestError(401, "unauthorized", "unknown or expired bearer token")

    def authorize(self, authorization: str | None, table: str) -> None:
        """Raise ``AuthFailure`` unless ``authorization`` is a live token allowed to write ``table``."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthFailure("UNAUTHENTICATED", "missing bearer token (authorization: Bearer <token>)")
        with self._lock:
            issued = self._tokens.get(authorization[7:].strip())
        if issued is None:
            raise AuthFailure("UNAUTHENTICATED", "unknown bearer token")
        if issued.expires_at <= time.monotonic():
            raise AuthFailure("UNAUTHENTICATED", "bearer token expired")
        if issued.tables is not None and table.lower() not in issued.tables:
            raise AuthFailure(
                "PERMISSION_DENIED",
                f"token is scoped to {sorted(issued.tables)}, not to table {table} (request a token for it)",
            )
