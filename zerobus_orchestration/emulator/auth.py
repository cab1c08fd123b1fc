"""OAuth tokens for the emulator, scoped to tables like the Databricks ones, valid until they expire.

The SDK posts to ``<unity_catalog_url>/oidc/v1/token`` with HTTP Basic client credentials and an
``authorization_details`` JSON list whose ``TABLE`` entry names the table it will write
(``rust/sdk/src/default_token_factory.rs`` in databricks/zerobus-sdk), or exchanges an IdP JWT for a
token (RFC 8693, ``federation.py``). A token from a request without table details is a workspace
token: it may write any table.

A token is self-contained and signed (HMAC-SHA256) with the warehouse's signing key, which lives in the
emulator's owner-only state (``private.signing_key``): a restarted emulator still accepts every token
it issued until the token's expiry, as Databricks does. The official SDK relies on that: after a
reconnect it re-sends its cached token, and a refusal fails the stream for good (SDK 1.10; see
docs/adr/0003-emulator-fidelity-limits.md). Expired, forged or foreign-key tokens are refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from pydantic import SecretStr

from zerobus_orchestration.emulator.errors import AuthFailure, TokenRequestError
from zerobus_orchestration.emulator.federation import TOKEN_EXCHANGE, FederationVerifier

TOKEN_PREFIX = "zbemu1"
CLIENT_CREDENTIALS = "client_credentials"


@dataclass(frozen=True)
class IssuedToken:
    tables: frozenset[str] | None  # None: any table
    expires_at: float  # Unix time (wall clock: it must mean the same to the next process)


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


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    def __init__(
        self,
        client_id: str,
        client_secret: SecretStr,
        ttl_s: float,
        signing_key: bytes,
        federation: FederationVerifier | None = None,
    ) -> None:
        if len(signing_key) < 32:
            raise ValueError("the token signing key must hold at least 32 bytes")
        self._client_id = client_id
        self._client_secret = client_secret
        self._ttl_s = ttl_s
        self._key = signing_key
        self._federation = federation

    def issue(self, tables: frozenset[str] | None = None, ttl_s: float | None = None) -> str:
        """A new bearer token for ``tables`` (None: any table) valid for ``ttl_s`` (default configured)."""
        expires = time.time() + (self._ttl_s if ttl_s is None else ttl_s)
        scope = None if tables is None else sorted(t.lower() for t in tables)
        claims = {"exp": expires, "tables": scope, "nonce": secrets.token_urlsafe(12)}
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{TOKEN_PREFIX}.{body}.{self._signature(body)}"

    def _signature(self, body: str) -> str:
        return _b64(hmac.new(self._key, f"{TOKEN_PREFIX}.{body}".encode(), hashlib.sha256).digest())

    def verify(self, token: str) -> IssuedToken | None:
        """The claims of a token this warehouse's emulator signed (expired or not); None otherwise."""
        prefix, _, rest = token.partition(".")
        body, _, signature = rest.partition(".")
        if prefix != TOKEN_PREFIX or not body or not signature:
            return None
        if not hmac.compare_digest(signature, self._signature(body)):
            return None
        try:
            claims = json.loads(_unb64(body))
            tables = claims["tables"]
            return IssuedToken(
                None if tables is None else frozenset(str(t) for t in tables), float(claims["exp"])
            )
        except (binascii.Error, ValueError, KeyError, TypeError):  # signed by us, so never: refuse anyway
            return None

    def token_response(self, authorization: str | None, body: bytes) -> dict[str, object]:
        """Answer a ``POST /oidc/v1/token``; raises ``TokenRequestError`` with the HTTP status.

        Client credentials (HTTP Basic) or, with federation policies configured, an RFC 8693 token
        exchange of an IdP JWT (federation.py; no Basic credentials, the subject token is the credential).
        """
        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        ttl_s = self._ttl_s
        if form.get("grant_type") == TOKEN_EXCHANGE:
            if self._federation is None:
                raise TokenRequestError(
                    400,
                    "unsupported_grant_type",
                    "token exchange needs a federation policy: set zerobus.emulator.federation_policies",
                )
            exchanged = self._federation.verify(form)
            ttl_s = min(ttl_s, exchanged.expires_at - time.time())  # never outlives its subject token
        else:
            self._check_client(authorization)
            if form.get("grant_type") != CLIENT_CREDENTIALS:
                grant = form.get("grant_type")
                raise TokenRequestError(400, "unsupported_grant_type", f"grant_type {grant!r}")
        details = form.get("authorization_details")
        tables = tables_in_authorization_details(details) if details else None
        token = self.issue(tables, ttl_s)
        return {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(ttl_s),
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
        issued = self.verify(authorization[7:].strip())
        if issued is None or issued.expires_at <= time.time():
            raise TokenRequestError(401, "unauthorized", "unknown or expired bearer token")

    def authorize(self, authorization: str | None, table: str) -> None:
        """Raise ``AuthFailure`` unless ``authorization`` is a live token allowed to write ``table``."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthFailure("UNAUTHENTICATED", "missing bearer token (authorization: Bearer <token>)")
        issued = self.verify(authorization[7:].strip())
        if issued is None:
            raise AuthFailure("UNAUTHENTICATED", "unknown bearer token")
        if issued.expires_at <= time.time():
            raise AuthFailure("UNAUTHENTICATED", "bearer token expired")
        if issued.tables is not None and table.lower() not in issued.tables:
            raise AuthFailure(
                "PERMISSION_DENIED",
                f"token is scoped to {sorted(issued.tables)}, not to table {table} (request a token for it)",
            )
