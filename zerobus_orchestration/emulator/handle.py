"""What the runtime needs of an embedded emulator, wherever it runs.

``Emulator`` (in this process) and ``RemoteEmulator`` (a shared daemon, see ``daemon.py``) both satisfy
``EmulatorHandle``, so the runtime's code path is the same: the SDK transport goes to ``endpoint`` with
tokens from ``workspace_url``, read-back goes to ``iceberg_rest_uri``, and ``materialize_now`` commits
the write-ahead log so a Delta version holds every acknowledged row.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol
from urllib.parse import quote

from zerobus_orchestration.emulator.advert import HEALTH_PATH, Advertisement, http_json
from zerobus_orchestration.errors import ZerobusOrchestrationError

log = logging.getLogger(__name__)


class EmulatorHandle(Protocol):
    @property
    def endpoint(self) -> str: ...

    @property
    def workspace_url(self) -> str: ...

    @property
    def iceberg_rest_uri(self) -> str: ...

    def materialize_now(self, table: str) -> int | None: ...

    def stop(self) -> None: ...


class RemoteEmulatorError(ZerobusOrchestrationError):
    """The shared emulator refused or failed a request."""


class RemoteEmulator:
    """A client of a shared emulator daemon. ``stop()`` ends only this client's lease, never the daemon.

    While the handle is open a lease thread sends a health request every third of the daemon's idle
    period: a runtime may hold the endpoint with no stream open (between two steps, or before its first
    write), and the daemon must not idle out from under it. The daemon's idle clock starts once every
    client has stopped.
    """

    def __init__(self, advert: Advertisement) -> None:
        self.advert = advert
        self._stopped = threading.Event()
        self._lease = threading.Thread(target=self._keep_alive, name="zerobus-emulator-lease", daemon=True)
        self._lease.start()

    @property
    def pid(self) -> int:
        return self.advert.pid

    @property
    def endpoint(self) -> str:
        return self.advert.endpoint

    @property
    def workspace_url(self) -> str:
        return self.advert.workspace_url

    @property
    def iceberg_rest_uri(self) -> str:
        return self.advert.iceberg_rest_uri

    def materialize_now(self, table: str) -> int | None:
        """``POST /_emulator/materialize?table=``: the daemon commits ``table``'s WAL to Delta now."""
        url = f"{self.workspace_url}/_emulator/materialize?table={quote(table, safe='')}"
        try:
            status, body = http_json(url, method="POST", timeout_s=120.0)
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

    def stop(self) -> None:
        self._stopped.set()

    def _keep_alive(self) -> None:
        interval = max(0.2, self.advert.idle_shutdown_s / 3)
        while not self._stopped.wait(interval):
            try:
                http_json(self.workspace_url + HEALTH_PATH, timeout_s=interval)
            except (OSError, ValueError) as exc:  # the next write reports a dead daemon loudly
                log.debug("lease on the shared emulator %s: %s", self.workspace_url, exc)
