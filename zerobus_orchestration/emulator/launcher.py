"""Find or start the shared emulator of a warehouse (``emulator.mode = "daemon"``), client side.

Under ``<state>/emulator.lock``: use the advertised daemon if its pid is alive and it answers its health
check; otherwise start ``python -m <entry module> --daemon`` detached (its own session, output to
``<state>/emulator.log``, the config on stdin so secrets never reach argv) and wait, bounded, until it
advertises itself and answers. Concurrent starters queue on the lock, so one daemon starts. The entry
module is the embedded mode's (``zerobus_orchestration.runtime.embedded``, which adds credential vending) or,
by default, this package's own.

The client credentials are the warehouse's (``private.with_warehouse_secret``), read from the state
folder by the daemon and its clients alike. A handle whose daemon died calls back here to replace it:
the successor is asked to serve on the dead daemon's ports, so SDK streams that are still retrying
reconnect to it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.advert import (
    Advertisement,
    DaemonPaths,
    StartLock,
    emulator_settings_digest,
    is_live,
    read_advertisement,
    remove_advertisement,
)
from zerobus_orchestration.emulator.daemon_handoff import PREFER_PORTS_FLAG, config_for_daemon, daemon_paths
from zerobus_orchestration.emulator.errors import EmulatorDaemonError
from zerobus_orchestration.emulator.handle import RemoteEmulator
from zerobus_orchestration.emulator.private import with_warehouse_secret
from zerobus_orchestration.owner_only import open_private, private_dir
from zerobus_orchestration.retry import Backoff, poll_until

log = logging.getLogger(__name__)

EMULATOR_MODULE = "zerobus_orchestration.emulator"  # serves without credential vending
START_MARKER = "starting zerobus emulator daemon"  # one line per lock-guarded start, in the log file
_LOG_TAIL_LINES = 20
_START_POLL = Backoff(initial_s=0.05, max_s=0.05, multiplier=1.0)  # a starting daemon: look often


def connect_daemon(
    config: ZerobusConfig, *, entry_module: str = EMULATOR_MODULE, watch: bool = True
) -> RemoteEmulator:
    """A handle on ``config.warehouse``'s shared emulator, started if none serves.

    ``watch=False``: the handle holds no lease (a read-only verifier), so the daemon still idles out.

    ``entry_module``: what ``python -m`` runs as the daemon. The embedded mode names its own, which
    hands the daemon what the emulator does not import (credential vending, a catalog concern).
    """
    config = with_warehouse_secret(config)
    paths = daemon_paths(config)
    advert = find_or_start(config, paths, entry_module=entry_module)

    def relaunch(dead: Advertisement) -> Advertisement:
        return find_or_start(config, paths, replacing=dead, entry_module=entry_module)

    return RemoteEmulator(
        advert,
        client_id=config.emulator.client_id,
        client_secret=config.emulator.client_secret,
        relaunch=relaunch,
        advert_path=paths.advert,
        log_path=paths.log,
        watch=watch,
    )


def find_or_start(
    config: ZerobusConfig,
    paths: DaemonPaths,
    replacing: Advertisement | None = None,
    *,
    entry_module: str = EMULATOR_MODULE,
) -> Advertisement:
    """The live daemon's advertisement, starting one under the lock if none serves.

    ``replacing``: a dead daemon; its successor is asked to serve on the same ports.
    """
    private_dir(paths.state)
    timeout_s = config.emulator.daemon_start_timeout_s
    lock = StartLock(paths.lock)
    # A waiting starter may queue behind one that is itself waiting for a daemon to come up.
    if not lock.acquire(timeout_s * 2 + 10):
        raise EmulatorDaemonError(
            f"{paths.lock} stayed locked for {timeout_s * 2 + 10:g} s: another process is stuck starting "
            f"the shared emulator of {config.warehouse}; see {paths.log}"
        )
    try:
        advert = read_advertisement(paths.advert)
        if advert is not None and is_live(advert):
            _warn_if_settings_differ(config, advert)
            log.info("using the shared Zerobus emulator %d at %s", advert.pid, advert.endpoint)
            return advert
        if advert is not None:
            log.warning("stale emulator advertisement (pid %d no longer serves): replacing it", advert.pid)
            remove_advertisement(paths.advert, advert.pid)
            replacing = replacing or advert  # its clients may still be retrying its ports
        advert = _start(config, paths, timeout_s, replacing, entry_module)
    finally:
        lock.release()
    log.info("started the shared Zerobus emulator %d at %s (log %s)", advert.pid, advert.endpoint, paths.log)
    return advert


def _start(
    config: ZerobusConfig,
    paths: DaemonPaths,
    timeout_s: float,
    replacing: Advertisement | None = None,
    entry_module: str = EMULATOR_MODULE,
) -> Advertisement:
    command = [
        sys.executable,
        "-m",
        entry_module,
        "--warehouse",
        config.warehouse,
        "--json",
        "--daemon",
        "--config-stdin",
    ]
    if replacing is not None:
        command += [PREFER_PORTS_FLAG, f"{_port(replacing.endpoint)},{_port(replacing.workspace_url)}"]
    with open(open_private(paths.log, os.O_WRONLY | os.O_APPEND), "ab") as log_file:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        log_file.write(f"{stamp} {START_MARKER} for {config.warehouse} (by pid {os.getpid()})\n".encode())
        log_file.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=paths.state,
            start_new_session=True,  # outlives the step or task that started it, and its signals
            close_fds=True,
        )
    assert process.stdin is not None
    try:
        process.stdin.write(config_for_daemon(config).encode())
        process.stdin.close()
    except OSError:  # it died before reading; reported below with its log
        pass
    advert = _wait_until_serving(process, paths, timeout_s)
    # Reap it when it exits, so its pid does not linger as a zombie that looks alive.
    threading.Thread(target=process.wait, name="zerobus-emulator-reaper", daemon=True).start()
    return advert


def _wait_until_serving(
    process: subprocess.Popen[bytes], paths: DaemonPaths, timeout_s: float
) -> Advertisement:

    def serving() -> Advertisement | None:
        code = process.poll()
        if code is not None:
            raise EmulatorDaemonError(
                f"the shared Zerobus emulator exited with code {code} while starting; see {paths.log}:\n"
                + _tail(paths.log),
                exited=True,
            )
        advert = read_advertisement(paths.advert)
        return advert if advert is not None and advert.pid == process.pid and is_live(advert) else None

    advert = poll_until(serving, timeout_s=timeout_s, backoff=_START_POLL)
    if advert is not None:
        return advert
    process.kill()
    process.wait()
    raise EmulatorDaemonError(
        f"the shared Zerobus emulator did not serve within {timeout_s:g} s (killed it); see {paths.log} "
        "(or raise zerobus.emulator.daemon_start_timeout_s):\n" + _tail(paths.log)
    )


def _warn_if_settings_differ(config: ZerobusConfig, advert: Advertisement) -> None:
    if advert.settings != emulator_settings_digest(config.emulator):
        log.warning(
            "the shared emulator of %s (pid %d) was started with other emulator settings; using it as is "
            "(stop it, or let it idle out, to apply this config's)",
            config.warehouse,
            advert.pid,
        )


def _port(url: str) -> int:
    return urlsplit(url).port or 0


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-_LOG_TAIL_LINES:])
