"""The shared local emulator of one warehouse (``emulator.mode = "daemon"``), server side.

Only one process may hold a warehouse's emulator (the WAL lock), and an emulator inside a step or task
process dies with it. The daemon is that one emulator in a process of its own, found and started by
``launcher.connect_daemon``: it advertises itself in ``<state>/emulator.json`` once it serves, and exits
by itself after ``idle_shutdown_s`` with no open stream and no HTTP request (or on SIGTERM/SIGINT),
committing its write-ahead log to Delta and removing its advertisement.

    python -m zerobus_orchestration.emulator --warehouse ./wh --daemon --json   # started by hand

The runtime starts it as ``python -m zerobus_orchestration.runtime.embedded --daemon``, which hands in the
credential vending (catalog code) this leaf package does not import.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.advert import (
    Advertisement,
    StartLock,
    emulator_settings_digest,
    remove_advertisement,
    write_advertisement,
)
from zerobus_orchestration.emulator.daemon_handoff import PREFER_PORTS_FLAG as PREFER_PORTS_FLAG
from zerobus_orchestration.emulator.daemon_handoff import config_for_daemon as config_for_daemon
from zerobus_orchestration.emulator.daemon_handoff import daemon_paths
from zerobus_orchestration.emulator.errors import EmulatorError
from zerobus_orchestration.emulator.iceberg_rest import TableCredentialSource
from zerobus_orchestration.emulator.own_process import freeze_startup_heap, yield_table_work
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.emulator.start import start_emulator
from zerobus_orchestration.owner_only import private_dir

log = logging.getLogger(__name__)

SHUTDOWN_LOCK_WAIT_S = 10.0  # a starter holds the lock only to check or start; never this long


def run_daemon(
    config: ZerobusConfig,
    *,
    as_json: bool = False,
    prefer_ports: tuple[int, int] | None = None,
    credentials: TableCredentialSource | None = None,
) -> int:
    """Serve ``config.warehouse`` until idle or signalled; the process exit code.

    ``prefer_ports`` (gRPC, HTTP): serve there if they are free and the config fixes no ports, so the
    clients of a daemon that died, whose SDK streams keep retrying its address, reconnect to this one.
    ``credentials``: what the Iceberg REST facade vends readers (``zerobus.credential_vending``); the
    embedded-mode entry point builds it, since vending is catalog code the emulator does not import.
    """
    paths = daemon_paths(config)
    private_dir(paths.state)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("zerobus emulator daemon %d starting for %s", os.getpid(), config.warehouse)
    try:
        emulator = _start_emulator(config, prefer_ports, credentials)
    except Exception:
        log.exception("zerobus emulator daemon %d could not start", os.getpid())
        return 1
    freeze_startup_heap()
    yield_table_work()
    advert = Advertisement(
        pid=os.getpid(),
        endpoint=emulator.endpoint,
        workspace_url=emulator.workspace_url,
        iceberg_rest_uri=emulator.iceberg_rest_uri,
        warehouse=config.warehouse,
        started_at=time.time(),
        idle_shutdown_s=config.emulator.idle_shutdown_s,
        settings=emulator_settings_digest(config.emulator),
    )
    lock = StartLock(paths.lock)
    try:
        write_advertisement(paths.advert, advert)
        log.info("zerobus emulator daemon %d serving %s at %s", advert.pid, advert.warehouse, advert.endpoint)
        if as_json:
            sys.stdout.write(json.dumps(advert.as_dict()) + "\n")
            sys.stdout.flush()
        reason = _serve(emulator, stop, lock, config.emulator.idle_shutdown_s)
        log.info("zerobus emulator daemon %d stopping: %s", advert.pid, reason)
    finally:
        # Unadvertise first, under the lock: a client either saw this daemon alive and reset its idle
        # clock before we decided, or finds no advertisement and starts a fresh daemon after we stop.
        remove_advertisement(paths.advert, advert.pid)
        try:
            emulator.stop()  # commits everything acknowledged to Delta, closes the WALs, drops the WAL lock
        finally:
            lock.release()
    log.info("zerobus emulator daemon %d stopped; write-ahead log committed", advert.pid)
    return 0


def _start_emulator(
    config: ZerobusConfig, prefer_ports: tuple[int, int] | None, credentials: TableCredentialSource | None
) -> Emulator:
    fixed = config.emulator.port or config.emulator.token_port
    if prefer_ports is not None and not fixed:
        port, token_port = prefer_ports
        emulator = config.emulator.model_copy(update={"port": port, "token_port": token_port})
        try:
            return start_emulator(config.model_copy(update={"emulator": emulator}), credentials)
        except (EmulatorError, OSError) as exc:  # taken meanwhile: any free port will do
            log.warning("could not serve on the previous daemon's ports %s: %s", prefer_ports, exc)
    return start_emulator(config, credentials)


def _serve(emulator: Emulator, stop: threading.Event, lock: StartLock, idle_shutdown_s: float) -> str:
    """Wait for a signal or for ``idle_shutdown_s`` of idleness; returns holding ``lock`` if it could."""
    poll_s = min(0.5, idle_shutdown_s / 4)
    while not stop.wait(poll_s):
        if emulator.idle_s() < idle_shutdown_s:
            continue
        if not lock.acquire(timeout_s=poll_s):  # a starter is checking this daemon: it is not idle
            continue
        if emulator.idle_s() >= idle_shutdown_s:
            return f"idle for {idle_shutdown_s:g} s"
        lock.release()
    if not lock.acquire(timeout_s=SHUTDOWN_LOCK_WAIT_S):
        log.warning("stopping without %s (a starter holds it)", lock.path)
    return "signalled"
