"""Reach what a remote config points at, once and with short timeouts, before anything waits on it.

Two probes, both run so one answer names every problem: a TCP connection to the Zerobus endpoint
(through the ``*_proxy`` variables the SDK would use, by HTTP CONNECT), and an OAuth client-credentials
token request at ``<workspace_url>/oidc/v1/token``, the request the SDK makes before it opens a stream.
The runtime calls ``require_reachable`` when it starts on a remote endpoint, so an unreachable workspace
fails within ``zerobus.connect_timeout_s`` naming the URL and the cause, instead of the SDKs' own
minutes-long retries ending in a message that names neither; the Airflow hook's ``test_connection``
reports ``probe_remote``'s answer. No secret in any message: the client secret is only ever put in the
request's Authorization header, and scrubbed from anything a server sends back.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import ConfigError, ErrorClass, ZerobusOrchestrationError

log = logging.getLogger(__name__)


class ProbeError(ZerobusOrchestrationError):
    """One reachability probe failed; the message names the URL and the cause, never a secret.

    Not retriable as such: the probe is a diagnosis (a wrong URL, a refused secret, a proxy in the way)
    that the config's owner acts on; ``probe_remote`` folds these into its answer.
    """


class EndpointUnreachableError(ZerobusOrchestrationError):
    """The runtime's start-up probe of a remote endpoint failed (every cause named, with its URL).

    Retriable: a network that is down now may be back for the next try, which again fails within
    ``timeout_s`` if it is not.
    """

    error_class = ErrorClass.TRANSIENT

    def __init__(self, message: str, *, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s  # the probe's bound on each contact


TOKEN_PATH = "/oidc/v1/token"
DEFAULT_TIMEOUT_S = 10.0  # ``zerobus.connect_timeout_s``'s default too
_DEFAULT_PORTS = {"https": 443, "http": 80}
_MAX_DETAIL = 200


def probe_remote(config: ZerobusConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """``(ok, message)`` after trying the endpoint and the token endpoint the config names."""
    endpoint, workspace_url, client_id = config.endpoint, config.workspace_url, config.client_id
    if endpoint is None or workspace_url is None or client_id is None:
        # Named here, not as the SDKs' "Invalid URL 'None'" minutes later.
        missing = [k for k in ("endpoint", "workspace_url", "client_id") if getattr(config, k) is None]
        raise ConfigError(f"a remote Zerobus endpoint needs zerobus.{', zerobus.'.join(missing)} (unset)")
    secret = config.client_secret.get_secret_value() if config.client_secret is not None else ""
    token_url = workspace_url.rstrip("/") + TOKEN_PATH
    checks: list[Callable[[], str]] = [
        lambda: reach_endpoint(endpoint, timeout_s),
        lambda: fetch_token(token_url, client_id, secret, timeout_s),
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


def require_reachable(config: ZerobusConfig) -> None:
    """Raise ``EndpointUnreachableError`` unless ``config``'s endpoint and token endpoint answer.

    Each contact is bounded by ``config.connect_timeout_s``; nothing is retried here (the caller's retry
    policy decides), so a dead workspace costs one timeout per try, not the SDKs' minutes.
    """
    timeout_s = config.connect_timeout_s
    log.info("reaching Zerobus endpoint %s and workspace %s", config.endpoint, config.workspace_url)
    ok, message = probe_remote(config, timeout_s)
    if not ok:
        raise EndpointUnreachableError(
            f"{message} (each contact waits at most zerobus.connect_timeout_s = {timeout_s:g} s)",
            timeout_s=timeout_s,
        )
    log.info("%s", message)


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
        if isinstance(exc.reason, TimeoutError):  # the connect itself timed out
            raise ProbeError(f"{what} failed: no answer within {timeout_s:g} s") from None
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
