"""Reach what a remote ``zerobus`` connection points at, for ``test_connection`` (the UI button and
``airflow connections test``).

Two probes with short timeouts, both run so one answer names every problem: a TCP connection to the
Zerobus endpoint (through the ``*_proxy`` variables the SDK would use, by HTTP CONNECT), and an OAuth
client-credentials token request at ``<workspace_url>/oidc/v1/token``, the request the SDK makes before
it opens a stream. No Airflow imports, and no secret in any message: the client secret is only ever put
in the request's Authorization header, and scrubbed from anything a server sends back.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from airflow_provider.exceptions import ProbeError
from zerobus_orchestration.config import ZerobusConfig

TOKEN_PATH = "/oidc/v1/token"
DEFAULT_TIMEOUT_S = 10.0
_DEFAULT_PORTS = {"https": 443, "http": 80}
_MAX_DETAIL = 200


def probe_remote(config: ZerobusConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """``(ok, message)`` after trying the endpoint and the token endpoint the config names."""
    if config.endpoint is None or config.workspace_url is None or config.client_id is None:
        raise ValueError("probe_remote needs a remote config (endpoint, workspace_url, client_id)")
    secret = config.client_secret.get_secret_value() if config.client_secret is not None else ""
    token_url = config.workspace_url.rstrip("/") + TOKEN_PATH
    checks: list[Callable[[], str]] = [
        lambda: reach_endpoint(config.endpoint or "", timeout_s),
        lambda: fetch_token(token_url, config.client_id or "", secret, timeout_s),
    ]
    done, failed = [], []
    for check in checks:
        try:
            done.append(check())
        except ProbeError as exc:
            failed.append(_scrub(str(exc), secret))
    if failed:
        return False, "; ".join(failed)
    return True, "; ".join(done)


def reach_endpoint(endpoint: str, timeout_s: float) -> str:
    """Open (and close) a TCP connection to the endpoint; returns what was reached."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname
    if not host:
        raise ProbeError(f"Zerobus endpoint {endpoint} has no host name")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    proxy = _proxy_for(parts.scheme, host)
    try:
        if proxy is None:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return f"Zerobus endpoint {endpoint} reachable (TCP {host}:{port})"
        _tunnel(proxy, host, port, timeout_s)
        return f"Zerobus endpoint {endpoint} reachable (through proxy {_display(proxy)})"
    except TimeoutError:
        raise ProbeError(
            f"Zerobus endpoint {endpoint} unreachable: no answer within {timeout_s:g} s"
        ) from None
    except OSError as exc:
        via = "" if proxy is None else f" through proxy {_display(proxy)}"
        raise ProbeError(f"Zerobus endpoint {endpoint} unreachable{via}: {_os_cause(exc)}") from None


def fetch_token(token_url: str, client_id: str, secret: str, timeout_s: float) -> str:
    """Ask for a workspace token with the client credentials; returns what answered."""
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    request = urllib.request.Request(
        token_url,
        data=urllib.parse.urlencode({"grant_type": "client_credentials", "scope": "all-apis"}).encode(),
        headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    what = f"OAuth token request to {token_url} for client ID {client_id!r}"
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise ProbeError(f"{what} refused: HTTP {exc.code}{_oauth_error(exc)}") from None
    except urllib.error.URLError as exc:
        cause = exc.reason if isinstance(exc.reason, str) else _os_cause(exc.reason)
        raise ProbeError(f"{what} failed: {cause}") from None
    except TimeoutError:
        raise ProbeError(f"{what} failed: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ProbeError(f"{what} failed: {_os_cause(exc)}") from None
    try:
        token = json.loads(body).get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not token:
        raise ProbeError(f"{what} answered without an access_token (is workspace_url the workspace URL?)")
    return f"OAuth token issued by {token_url} for client ID {client_id!r}"


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """``error`` / ``error_description`` of an OAuth error body, shortened; empty if there is none."""
    try:
        payload = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return ""
    if not isinstance(payload, dict):
        return ""
    text = ": ".join(str(payload[k]) for k in ("error", "error_description") if payload.get(k))
    return f" ({text[:_MAX_DETAIL]})" if text else ""


def _proxy_for(scheme: str, host: str) -> str | None:
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("https" if scheme == "https" else "http")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _tunnel(proxy: str, host: str, port: int, timeout_s: float) -> None:
    """HTTP CONNECT through the proxy, as the SDK does; raises ``OSError`` unless the proxy says 200."""
    parts = urllib.parse.urlsplit(proxy)
    headers = {}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout_s)
    conn.set_tunnel(host, port, headers=headers)
    try:
        conn.connect()
    finally:
        conn.close()


def _display(url: str) -> str:
    """A proxy URL without its credentials."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 80}"


def _os_cause(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return f"host name not found ({exc.strerror or exc})"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text
