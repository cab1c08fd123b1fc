"""The advertisement of a shared (daemon) emulator: where it serves, written once it does.

``<state>/emulator.json`` is written atomically (owner-only) by the daemon after it serves and removed
when it stops; clients trust it only while the pid is alive AND ``GET /_emulator/health`` answers (a
crashed daemon leaves a stale file, and a pid can be reused). ``<state>/emulator.lock`` serialises
starters with the daemon's own shutdown, so a client never picks a daemon that is going away;
``<state>/emulator.log`` holds every daemon's output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.owner_only import open_private
from zerobus_orchestration.retry import Backoff, poll_until

# A constant, short poll: the lock holder (a starting daemon) releases within a second or two.
_LOCK_POLL = Backoff(initial_s=0.02, max_s=0.02, multiplier=1.0)

ADVERT_FILE = "emulator.json"
LOCK_FILE = "emulator.lock"
LOG_FILE = "emulator.log"
HEALTH_PATH = "/_emulator/health"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the daemon is on loopback


@dataclass(frozen=True)
class DaemonPaths:
    """The files of the shared emulator of one state folder."""

    state: Path

    @property
    def advert(self) -> Path:
        return self.state / ADVERT_FILE

    @property
    def lock(self) -> Path:
        return self.state / LOCK_FILE

    @property
    def log(self) -> Path:
        return self.state / LOG_FILE


@dataclass(frozen=True)
class Advertisement:
    """What a client needs to use a running daemon, plus what tells a stale file from a live one."""

    pid: int
    endpoint: str
    workspace_url: str
    iceberg_rest_uri: str
    warehouse: str
    started_at: float  # unix time
    idle_shutdown_s: float
    settings: str  # ``emulator_settings_digest`` of the config the daemon was started with

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def emulator_settings_digest(config: EmulatorConfig) -> str:
    """Identity of the settings that shape the daemon's behaviour (a client with other ones is warned)."""
    data = config.model_dump(mode="json", exclude={"mode", "daemon_start_timeout_s", "client_secret"})
    data["client_secret"] = hashlib.sha256(config.client_secret.get_secret_value().encode()).hexdigest()
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def write_advertisement(path: Path, advert: Advertisement) -> None:
    """Atomically: readers see the whole file or none (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as fh:
        json.dump(advert.as_dict(), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_advertisement(path: Path) -> Advertisement | None:
    """The advertisement, or None when absent or unreadable (treated as no daemon)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Advertisement(**data)
    except (OSError, ValueError, TypeError):
        return None


def remove_advertisement(path: Path, pid: int) -> None:
    """Remove the advertisement if it is ``pid``'s (never a newer daemon's)."""
    current = read_advertisement(path)
    if current is not None and current.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: the signal probe is all we have
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def http_json(
    url: str,
    *,
    method: str = "GET",
    timeout_s: float = 5.0,
    authorization: str | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, Any]]:
    """One request to the emulator's HTTP side (proxies bypassed); status and decoded JSON body.

    ``authorization`` is the ``Authorization`` header value (the control routes require one)."""
    data = body if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(url, method=method, data=data)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with _NO_PROXY.open(request, timeout=timeout_s) as response:
            return int(response.status), json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body or b"{}")
        except ValueError:
            return exc.code, {"error": {"message": body.decode(errors="replace")}}


def answers_health(advert: Advertisement, timeout_s: float = 2.0) -> bool:
    try:
        status, _ = http_json(advert.workspace_url + HEALTH_PATH, timeout_s=timeout_s)
    except (OSError, ValueError):
        return False
    return status == 200


def is_live(advert: Advertisement) -> bool:
    """The advertised daemon runs and serves (also resets its idle clock: a health check is a request)."""
    return pid_alive(advert.pid) and answers_health(advert)


class StartLock:
    """``fcntl.flock`` on ``emulator.lock``: starters and a stopping daemon take turns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the lock; False when it stayed taken."""
        fd = open_private(self.path, os.O_RDWR)

        def locked() -> bool | None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None
            return True

        if poll_until(locked, timeout_s=timeout_s, backoff=_LOCK_POLL) is None:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock
