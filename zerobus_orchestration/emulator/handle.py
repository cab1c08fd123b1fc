"""What the runtime needs of an embedded emulator, wherever it runs.

``Emulator`` (in this process) and ``RemoteEmulator`` (a shared daemon, see ``daemon.py``) both satisfy
``EmulatorHandle``, so the runtime's code path is the same: the SDK transport goes to ``endpoint`` with
tokens from ``workspace_url``, read-back goes to ``iceberg_rest_uri`` with ``access_token()``, and
``materialize_now`` commits the write-ahead log so a Delta version holds every acknowledged row.

A shared daemon can die under its clients (killed, out of memory). ``RemoteEmulator`` watches its pid:
when the daemon crashed (its advertisement is left behind) the handle starts or reattaches to a new one
at once, on the same ports when it can, so the SDK's own recovery reconnects to it; when it stopped
cleanly (advertisement removed) the handle reattaches on the next use (``ensure_live``). Streams that
gave up meanwhile are rebuilt by the pool through ``DaemonTransport``, which re-sends what was not
acknowledged (at-least-once; what the dead daemon had acknowledged is in its WAL, replayed on start).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlencode

from pydantic import SecretStr

from zerobus_orchestration.emulator.advert import (
    HEALTH_PATH,
    Advertisement,
    http_json,
    pid_alive,
    read_advertisement,
)
from zerobus_orchestration.emulator.errors import DaemonExitedError, RemoteEmulatorError

log = logging.getLogger(__name__)


class EmulatorHandle(Protocol):
    @property
    def endpoint(self) -> str: ...

    @property
    def workspace_url(self) -> str: ...

    @property
    def iceberg_rest_uri(self) -> str: ...

    def materialize_now(self, table: str) -> int | None: ...

    def access_token(self) -> SecretStr:
        """A bearer token for this emulator's HTTP side (Iceberg REST read-back, control routes)."""
        ...

    def stop(self) -> None: ...


Relaunch = Callable[[Advertisement], Advertisement]
"""Given the dead daemon's advertisement, start (or find) its successor under the start lock."""

WATCH_INTERVAL_S = 0.2  # a pid probe is one syscall and one procfs read: cheap enough to do often
_RETRY_AFTER_FAILED_RELAUNCH_S = 2.0


class RemoteEmulator:
    """A client of a shared emulator daemon. ``stop()`` ends only this client's lease, never the daemon.

    One watcher thread per handle: it probes the daemon's pid every ``WATCH_INTERVAL_S`` (and replaces a
    crashed daemon, see the module docstring) and sends a health request every third of the daemon's
    idle period, the lease: a runtime may hold the endpoint with no stream open (between two steps, or
    before its first write), and the daemon must not idle out from under it. The daemon's idle clock
    starts once every client has stopped.
    """

    def __init__(
        self,
        advert: Advertisement,
        *,
        client_id: str,
        client_secret: SecretStr,
        relaunch: Relaunch | None = None,
        advert_path: Path | None = None,
        log_path: Path | None = None,
        watch: bool = True,
    ) -> None:
        """``watch=False``: no watcher thread, hence no lease (a read-only client that must not keep the
        daemon from idling out) and no replacement of a dead daemon (its next request fails loudly).
        ``log_path``: the daemons' log, named when one exits and no successor starts."""
        self._advert = advert
        self._client_id = client_id
        self._client_secret = client_secret
        self._relaunch = relaunch
        self._advert_path = advert_path
        self._log_path = log_path
        self._replace_lock = threading.Lock()
        # The last failed replacement of this dead daemon: (when, why). A client asking meanwhile gets it
        # at once instead of starting one more successor that fails the same way.
        self._failed_relaunch: tuple[float, DaemonExitedError] | None = None
        self.replaced: list[tuple[int, int]] = []  # (dead pid, successor pid), oldest first
        self._stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="zerobus-emulator-lease", daemon=True)
        if watch:
            self._watcher.start()

    @property
    def advert(self) -> Advertisement:
        return self._advert

    @property
    def pid(self) -> int:
        return self._advert.pid

    @property
    def endpoint(self) -> str:
        return self._advert.endpoint

    @property
    def workspace_url(self) -> str:
        return self._advert.workspace_url

    @property
    def iceberg_rest_uri(self) -> str:
        return self._advert.iceberg_rest_uri

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def client_secret(self) -> SecretStr:
        return self._client_secret

    def ensure_live(self) -> Advertisement:
        """The serving daemon's advertisement; a dead daemon is replaced first (raises if it cannot be)."""
        current = self._advert
        if pid_alive(current.pid):
            return current
        return self._replace(current)

    def _replace(self, dead: Advertisement) -> Advertisement:
        with self._replace_lock:
            if self._advert is not dead:  # another thread replaced it while we waited
                return self._advert
            where = f"the shared Zerobus emulator (pid {dead.pid}, {dead.endpoint})"
            if self._relaunch is None or self._stopped.is_set():
                raise RemoteEmulatorError(f"{where} is gone and this handle cannot start another")
            failed = self._failed_relaunch
            if failed is not None and time.monotonic() - failed[0] < _RETRY_AFTER_FAILED_RELAUNCH_S:
                raise failed[1]
            log.warning("%s is gone; starting or reattaching to a new one for %s", where, dead.warehouse)
            try:
                successor = self._relaunch(dead)
            except Exception as exc:
                error = self._exited(dead, exc)
                self._failed_relaunch = (time.monotonic(), error)
                raise error from exc
            self._failed_relaunch = None
            self._advert = successor
            self.replaced.append((dead.pid, successor.pid))
            log.warning(
                "now using the shared Zerobus emulator %d at %s (replacing %d)",
                successor.pid,
                successor.endpoint,
                dead.pid,
            )
            return successor

    def _exited(self, dead: Advertisement, exc: Exception) -> DaemonExitedError:
        """Why a dead daemon has no successor: its pid, the daemons' log, and the successor's failure."""
        log_file = None if self._log_path is None else str(self._log_path)
        where = "" if log_file is None else f"; its log: {log_file}"
        return DaemonExitedError(
            f"the emulator daemon exited (pid {dead.pid}, {dead.endpoint}{where}) and no successor could be "
            f"started: {exc}",
            pid=dead.pid,
            log=log_file,
            successor_exited=bool(getattr(exc, "exited", False)),
        )

    def _basic(self) -> str:
        pair = f"{self._client_id}:{self._client_secret.get_secret_value()}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def materialize_now(self, table: str) -> int | None:
        """``POST /_emulator/materialize?table=``: the daemon commits ``table``'s WAL to Delta now."""
        self.ensure_live()
        url = f"{self.workspace_url}/_emulator/materialize?table={quote(table, safe='')}"
        try:
            status, body = http_json(url, method="POST", timeout_s=120.0, authorization=self._basic())
        except OSError as exc:
            raise RemoteEmulatorError(
                f"{table}: the shared emulator (pid {self.pid}, {self.workspace_url}) did not answer "
                f"the materialise request: {exc}"
            ) from exc
        if status != 200:
            message = body.get("error", {}).get("message", body)
            raise RemoteEmulatorError(f"{table}: the shared emulator could not materialise: {message}")
        version = body.get("delta_version")
        return None if version is None else int(version)

    def access_token(self) -> SecretStr:
        """A workspace bearer token from the daemon's token endpoint (client credentials)."""
        self.ensure_live()
        form = urlencode({"grant_type": "client_credentials", "scope": "all-apis"}).encode()
        try:
            status, body = http_json(
                self.workspace_url + "/oidc/v1/token", method="POST", authorization=self._basic(), body=form
            )
        except OSError as exc:
            raise RemoteEmulatorError(
                f"the shared emulator (pid {self.pid}, {self.workspace_url}) issued no token: {exc}"
            ) from exc
        if status != 200 or "access_token" not in body:
            raise RemoteEmulatorError(
                f"the shared emulator (pid {self.pid}) refused this client's credentials (HTTP {status}); "
                "its secret is the warehouse's emulator.secret in the state folder"
            )
        return SecretStr(str(body["access_token"]))

    def stop(self) -> None:
        self._stopped.set()

    def _crashed(self, advert: Advertisement) -> bool:
        """Dead, and not by a clean stop (which removes the advertisement before exiting): its stale
        advertisement is left behind, or another client already advertises a successor."""
        if pid_alive(advert.pid):
            return False
        return self._advert_path is None or read_advertisement(self._advert_path) is not None

    def _watch(self) -> None:
        lease_every = max(0.2, self._advert.idle_shutdown_s / 3)
        next_lease = time.monotonic() + lease_every
        while not self._stopped.wait(WATCH_INTERVAL_S):
            advert = self._advert
            if self._relaunch is not None and self._crashed(advert):
                try:
                    self._replace(advert)
                except RemoteEmulatorError as exc:  # the next use retries, and reports it loudly
                    log.error("%s", exc)
                    self._stopped.wait(_RETRY_AFTER_FAILED_RELAUNCH_S)
                continue
            if time.monotonic() < next_lease:
                continue
            next_lease = time.monotonic() + lease_every
            try:
                http_json(self.workspace_url + HEALTH_PATH, timeout_s=lease_every)
            except (OSError, ValueError) as exc:  # the next write reports a dead daemon loudly
                log.debug("lease on the shared emulator %s: %s", self.workspace_url, exc)
