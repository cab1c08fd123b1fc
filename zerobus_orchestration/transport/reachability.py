"""Reach what a remote config points at, once and with short timeouts, before anything waits on it.

Two probes, run at once so one answer names every problem within one timeout: the Zerobus endpoint is
asked one gRPC question over HTTP/2 (``grpc_probe``: TCP alone proves nothing, a silent listener accepts
it too), through the ``*_proxy`` variables the SDK would use (HTTP CONNECT); and the workspace is asked
for an OAuth client-credentials token at ``<workspace_url>/oidc/v1/token``, the request the SDK makes
before it opens a stream. The runtime calls ``require_reachable`` when it starts on a remote endpoint,
so an unreachable workspace fails within ``zerobus.connect_timeout_s`` naming the URL, the setting and
the cause, instead of the SDK's own minutes-long retries ending in a message that names neither; the
Airflow hook's ``test_connection`` reports ``probe_remote``'s answer.

Classified for retries: refused client credentials (HTTP 4xx from the token endpoint) are
``CredentialsRefusedError``, not retriable (the config must change); anything else is
``EndpointUnreachableError``, retriable (a network that is down now may be back for the next try). No
secret in any message: the client secret is only ever put in the request's Authorization header, and
scrubbed from anything a server sends back.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import (
    ConfigError,
    CredentialsRefusedError,
    ErrorClass,
    ZerobusOrchestrationError,
)
from zerobus_orchestration.transport import grpc_probe

log = logging.getLogger(__name__)

ENDPOINT_SETTING = "zerobus.endpoint (ZEROBUS_ENDPOINT)"
WORKSPACE_SETTING = "zerobus.workspace_url (ZEROBUS_WORKSPACE_URL)"
CREDENTIALS_SETTING = "zerobus.client_id / zerobus.client_secret (ZEROBUS_CLIENT_ID / ZEROBUS_CLIENT_SECRET)"


class ProbeError(ZerobusOrchestrationError):
    """One reachability probe failed; the message names the URL and the cause, never a secret.

    Not retriable as such: the probe is a diagnosis (a wrong URL, a refused secret, a proxy in the way)
    that the config's owner acts on; ``probe_remote`` folds these into its answer.
    ``credentials_refused``: the token endpoint refused the client credentials (HTTP 4xx).
    """

    def __init__(self, message: str, *, credentials_refused: bool = False) -> None:
        super().__init__(message)
        self.credentials_refused = credentials_refused


class EndpointUnreachableError(ZerobusOrchestrationError):
    """The runtime's start-up probe of a remote endpoint failed (every cause named, with its URL and
    setting).

    Retriable: a network that is down now may be back for the next try, which again fails within
    ``timeout_s`` if it is not. (Refused credentials are ``CredentialsRefusedError`` instead.)
    """

    error_class = ErrorClass.TRANSIENT

    def __init__(self, message: str, *, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s  # the probe's bound on each contact


TOKEN_PATH = "/oidc/v1/token"
DEFAULT_TIMEOUT_S = 10.0  # ``zerobus.connect_timeout_s``'s default too
_DEFAULT_PORTS = {"https": 443, "http": 80}
_MAX_DETAIL = 200


@dataclass
class ProbeReport:
    """What the probes found: one line per probe that succeeded, and every failure."""

    done: list[str] = field(default_factory=list)
    failed: list[ProbeError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def message(self, secret: str = "") -> str:
        lines = [str(exc) for exc in self.failed] if self.failed else self.done
        return _scrub("; ".join(lines), secret)


def probe(config: ZerobusConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> ProbeReport:
    """Both probes of ``config``'s remote endpoint, at once, each bounded by ``timeout_s``."""
    endpoint, workspace_url, client_id = config.endpoint, config.workspace_url, config.client_id
    if endpoint is None or workspace_url is None or client_id is None:
        # Named here, not as the SDKs' "Invalid URL 'None'" minutes later.
        missing = [k for k in ("endpoint", "workspace_url", "client_id") if getattr(config, k) is None]
        raise ConfigError(f"a remote Zerobus endpoint needs zerobus.{', zerobus.'.join(missing)} (unset)")
    secret = config.client_secret.get_secret_value() if config.client_secret is not None else ""
    token_url = workspace_url.rstrip("/") + TOKEN_PATH
    report = ProbeReport()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="zerobus-probe") as pool:
        futures = [
            pool.submit(reach_endpoint, endpoint, timeout_s),
            pool.submit(fetch_token, token_url, client_id, secret, timeout_s),
        ]
        for future in futures:  # in this order, so the answer reads the same every time
            try:
                report.done.append(future.result())
            except ProbeError as exc:
                report.failed.append(exc)
    return report


def probe_remote(config: ZerobusConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """``(ok, message)`` after trying the endpoint and the token endpoint the config names."""
    report = probe(config, timeout_s)
    return report.ok, report.message(_secret_of(config))


def require_reachable(config: ZerobusConfig) -> None:
    """Raise unless ``config``'s endpoint and token endpoint answer: ``CredentialsRefusedError`` when the
    token endpoint refused the client credentials (fix them: not retriable), else
    ``EndpointUnreachableError`` naming every URL that did not answer and its setting.

    Each contact is bounded by ``config.connect_timeout_s``, both run at once; nothing is retried here
    (the caller's retry policy decides), so a dead workspace costs one timeout per try, not the SDKs'
    minutes.
    """
    timeout_s = config.connect_timeout_s
    log.info("reaching Zerobus endpoint %s and workspace %s", config.endpoint, config.workspace_url)
    report = probe(config, timeout_s)
    if report.ok:
        log.info("%s", report.message())
        return
    message = report.message(_secret_of(config))
    if any(exc.credentials_refused for exc in report.failed):
        assert config.client_id is not None and config.workspace_url is not None  # ``probe`` checked them
        raise CredentialsRefusedError(
            f"{message}; fix: {CREDENTIALS_SETTING} must be a service principal's OAuth client id and a "
            "current secret of it",
            client_id=config.client_id,
            token_url=config.workspace_url.rstrip("/") + TOKEN_PATH,
        )
    raise EndpointUnreachableError(
        f"{message} (each contact waits at most zerobus.connect_timeout_s = {timeout_s:g} s)",
        timeout_s=timeout_s,
    )


def reach_endpoint(endpoint: str, timeout_s: float) -> str:
    """Connect to the endpoint and ask it one gRPC question over HTTP/2 (``grpc_probe``); returns what
    answered. Fails naming the URL and ``ENDPOINT_SETTING`` when nothing answers within ``timeout_s``."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname
    if not host:
        raise ProbeError(f"Zerobus endpoint {endpoint} ({ENDPOINT_SETTING}) has no host name")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    proxy = _proxy_for(parts.scheme, host)
    via = "" if proxy is None else f" through proxy {_display(proxy)}"
    named = f"Zerobus endpoint {endpoint} ({ENDPOINT_SETTING})"
    deadline = time.monotonic() + timeout_s
    try:
        if proxy is None:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        else:
            sock = _tunnel(proxy, host, port, timeout_s)
    except TimeoutError:
        raise ProbeError(f"{named} unreachable{via}: no connection within {timeout_s:g} s") from None
    except OSError as exc:
        raise ProbeError(f"{named} unreachable{via}: {_os_cause(exc)}") from None
    authority = parts.netloc.rpartition("@")[2]
    try:
        answer = grpc_probe.ask(sock, scheme=parts.scheme, authority=authority, host=host, deadline=deadline)
    except grpc_probe.NoGrpcAnswer as exc:
        if exc.silent:
            raise ProbeError(
                f"{named} accepted a connection{via} but did not answer a gRPC request within {timeout_s:g} s"
            ) from None
        raise ProbeError(f"{named} does not answer gRPC{via}: {exc}") from None
    except OSError as exc:  # reset mid-exchange
        raise ProbeError(f"{named} does not answer gRPC{via}: {_os_cause(exc)}") from None
    return f"Zerobus endpoint {endpoint} {answer.describe()}{via}"


def fetch_token(token_url: str, client_id: str, secret: str, timeout_s: float) -> str:
    """Ask for a workspace token with the client credentials; returns what answered."""
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    request = urllib.request.Request(
        token_url,
        data=urllib.parse.urlencode({"grant_type": "client_credentials", "scope": "all-apis"}).encode(),
        headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    what = f"OAuth token request to {token_url} ({WORKSPACE_SETTING}) for client ID {client_id!r}"
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        # 4xx: the token endpoint judged the request (the SDK's InvalidUCTokenError, non-retriable);
        # 5xx: the endpoint is failing (its TokenFetchError, retriable).
        raise ProbeError(
            f"{what} refused: HTTP {exc.code}{_oauth_error(exc)}", credentials_refused=400 <= exc.code < 500
        ) from None
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


def _secret_of(config: ZerobusConfig) -> str:
    return config.client_secret.get_secret_value() if config.client_secret is not None else ""


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


def _tunnel(proxy: str, host: str, port: int, timeout_s: float) -> socket.socket:
    """HTTP CONNECT through the proxy, as the SDK does: the tunnelled socket; raises ``OSError`` unless
    the proxy says 200."""
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
        sock, conn.sock = conn.sock, None  # kept open: the probe speaks through it
    finally:
        conn.close()
    assert sock is not None
    return sock


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
