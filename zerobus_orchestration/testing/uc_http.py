"""The fake Unity Catalog's HTTP side: authenticate, record, answer through the emulator's routes.

Each request is authenticated (PAT, OAuth token or HTTP Basic for the token endpoint), recorded in
``FakeUnityCatalog.requests`` and answered by ``zerobus_orchestration.emulator.unity.routes`` from the
fake's state; this module holds no state.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from zerobus_orchestration.emulator.unity import routes
from zerobus_orchestration.emulator.unity.workspace import RecordedRequest

if TYPE_CHECKING:
    from zerobus_orchestration.testing.uc_fake import FakeUnityCatalog

__all__ = ["FakeUcHandler", "RecordedRequest"]


class FakeUcHandler(BaseHTTPRequestHandler):
    """One request to the fake: authenticate, record, route to the fake's state."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeUnityCatalog/1"

    @property
    def fake(self) -> FakeUnityCatalog:
        fake: FakeUnityCatalog = self.server.fake  # type: ignore[attr-defined]
        return fake

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read ``fake.requests``
        return

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        body = self._body()
        auth = self.fake.auth_kind(self.headers.get("Authorization"))
        self.fake.requests.append(RecordedRequest(method, path, auth))
        found = routes.discovery(self.fake, method, path, self.fake.url)
        if found is not None:
            self._send(*found)
            return
        if method == "POST" and path == routes.TOKEN_PATH:
            self._token(body)
            return
        if not path.startswith("/api/"):
            self._send(*routes.error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'"))
            return
        if auth not in ("pat", "oauth"):
            self._send(*routes.error(401, "UNAUTHENTICATED", "Invalid or expired access token."))
            return
        self._send(*routes.handle_api(self.fake, method, path, query, body))

    def _token(self, body: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if form.get("grant_type") != "client_credentials":
            self._send(
                400, {"error": "unsupported_grant_type", "error_description": "client_credentials only"}
            )
            return
        if not self.fake.check_client(self.headers.get("Authorization")):
            self._send(401, {"error": "invalid_client", "error_description": "Client authentication failed"})
            return
        token, ttl = self.fake.issue_token()
        self._send(
            200,
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": ttl,
                "scope": form.get("scope", "all-apis"),
            },
        )

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")
