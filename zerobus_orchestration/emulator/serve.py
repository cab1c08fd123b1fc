"""Run the emulator in the foreground (``zerobus-orch serve``, ``python -m zerobus_orchestration.emulator``).

Prints one JSON line with the endpoint, token URL and Iceberg REST URL (``--json``) or a short human
summary, then serves until SIGINT/SIGTERM, committing everything acknowledged before exiting.

Its ports are reachable by every local user, so it never serves with the well-known default client
secret unless told ``--insecure-well-known-secret``: a secret set in the config
(``zerobus.emulator.client_secret``) is used as it is, otherwise the warehouse's own, generated on first
use into ``<state>/emulator.secret`` (0600, the same file the embedded mode and the shared daemon use),
whose path is printed (``client_secret_file`` with ``--json``) for the clients to read it from.

``--daemon`` runs the shared emulator of the warehouse instead (see ``daemon.py``): it advertises itself
in the state folder and also exits after ``--idle-shutdown`` seconds without clients. The runtime starts
it with ``--config-stdin`` (the whole ``ZerobusConfig`` as JSON on stdin, so secrets stay off argv).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.emulator.faults import FaultSpec, load_faults
from zerobus_orchestration.emulator.own_process import (
    freeze_startup_heap,
    keep_freed_memory,
    yield_table_work,
)
from zerobus_orchestration.emulator.private import SECRET_FILE, WELL_KNOWN_SECRET, warehouse_secret
from zerobus_orchestration.emulator.server import Emulator, default_wal_dir
from zerobus_orchestration.emulator.unity.local_cloud import STATE_FILE_NAME

if TYPE_CHECKING:
    from zerobus_orchestration.emulator.iceberg_rest import TableCredentialSource


INSECURE_FLAG = "--insecure-well-known-secret"
log = logging.getLogger(__name__)


def served_secret(
    warehouse: str, config: EmulatorConfig, state_dir: Path | None, *, insecure_well_known: bool
) -> tuple[EmulatorConfig, Path | None]:
    """The settings to serve with, and the file their client secret was read from (None: the config's).

    A secret the config names is kept. The well-known default is kept only when ``insecure_well_known``;
    otherwise the warehouse's own secret replaces it (``private.warehouse_secret``, generated on first
    use) from ``<state>/emulator.secret``, ``state_dir`` or the emulator's default state folder.
    """
    if config.client_secret.get_secret_value() != WELL_KNOWN_SECRET:
        return config, None
    if insecure_well_known:
        log.warning(
            "serving with the well-known client secret (%s): any local user can get a token and write",
            INSECURE_FLAG,
        )
        return config, None
    state = state_dir if state_dir is not None else default_wal_dir(warehouse).parent
    secret = warehouse_secret(state)
    return config.model_copy(update={"client_secret": secret}), state / SECRET_FILE


def endpoints(emulator: Emulator, secret_file: Path | None = None) -> dict[str, object]:
    return {
        "endpoint": emulator.endpoint,
        "token_url": emulator.token_url,
        "workspace_url": emulator.workspace_url,
        "iceberg_rest_uri": emulator.iceberg_rest_uri,
        "warehouse": emulator.warehouse,
        "client_id": emulator.client_id,
        "sql_warehouse_id": emulator.sql_warehouse_id,
        "replayed": emulator.replayed,
        "pid": os.getpid(),
        # Where the generated client secret is (None: the config's own); the secret itself is never printed.
        "client_secret_file": None if secret_file is None else str(secret_file),
    }


def run(
    warehouse: str,
    config: EmulatorConfig,
    faults: list[FaultSpec] | None = None,
    as_json: bool = False,
    iceberg: bool = True,
    *,
    storage_options: dict[str, str] | None = None,
    state_dir: Path | None = None,
    credentials: TableCredentialSource | None = None,
    catalogs: Sequence[str] = ("main",),
    insecure_well_known_secret: bool = False,
) -> None:
    """Serve until SIGINT/SIGTERM.

    ``storage_options`` open an object-store warehouse; ``state_dir`` holds the WAL, the Iceberg catalog
    and the local Unity Catalog's records (default: the emulator's own defaults); ``credentials`` vends
    per-table READ keys (Iceberg REST and temporary table credentials) instead of the warehouse's own;
    ``catalogs`` exist in the local Unity Catalog from the start; ``insecure_well_known_secret`` serves
    with the default client secret instead of the warehouse's own (``served_secret``).
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config, secret_file = served_secret(
        warehouse, config, state_dir, insecure_well_known=insecure_well_known_secret
    )
    wal_dir = iceberg_db = unity_state = None
    if state_dir is not None:
        from zerobus_orchestration.emulator.iceberg_mirror import ICEBERG_DB_NAME

        wal_dir = str(state_dir / "wal")
        iceberg_db = str(state_dir / ICEBERG_DB_NAME)
        unity_state = str(state_dir / STATE_FILE_NAME)
    emulator = Emulator(
        warehouse,
        config,
        faults=faults or [],
        iceberg=iceberg,
        storage_options=storage_options,
        credentials=credentials,
        wal_dir=wal_dir,
        iceberg_db=iceberg_db,
        unity_state=unity_state,
        catalogs=catalogs,
    )
    emulator.start()
    freeze_startup_heap()
    yield_table_work()
    try:
        info = endpoints(emulator, secret_file)
        if as_json:
            sys.stdout.write(json.dumps(info) + "\n")
        else:
            sys.stdout.write(
                f"Zerobus emulator (warehouse {warehouse})\n"
                f"  endpoint          {info['endpoint']}\n"
                f"  token URL         {info['token_url']}  (SDK unity_catalog_url; POST /oidc/v1/token)\n"
                f"  Iceberg REST URL  {info['iceberg_rest_uri']}\n"
                f"  workspace URL     {info['workspace_url']}  (OIDC, Unity Catalog, SQL statements)\n"
                f"  SQL warehouse id  {info['sql_warehouse_id']}\n"
                f"  client id         {config.client_id}\n"
                f"  client secret     {_secret_line(config, secret_file)}\n"
                "Ctrl-C to stop.\n"
            )
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    finally:
        emulator.stop()


def _secret_line(config: EmulatorConfig, secret_file: Path | None) -> str:
    """Where the clients find the client secret; never the secret itself."""
    if secret_file is not None:
        return (
            f"in {secret_file} (generated for this warehouse, owner-only):\n"
            f'    export ZEROBUS_CLIENT_ID={config.client_id} ZEROBUS_CLIENT_SECRET="$(cat {secret_file})"'
        )
    if config.client_secret.get_secret_value() == WELL_KNOWN_SECRET:
        return f"the well-known default ({INSECURE_FLAG}): any local user can get a token"
    return "from the config (zerobus.emulator.client_secret); not printed"


CredentialsFor = Callable[[ZerobusConfig], "TableCredentialSource | None"]
"""The daemon's Iceberg credential vending for a config; supplied by the embedded-mode entry point."""


def main(argv: list[str] | None = None, *, credentials_for: CredentialsFor | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zerobus_orchestration.emulator")
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-port", type=int, default=0)
    parser.add_argument(
        "--time-to-table", type=float, default=1.0, help="Seconds between WAL -> Delta commits."
    )
    parser.add_argument("--max-streams-per-table", type=int, default=None)
    parser.add_argument("--faults", type=Path, default=None, help="JSON list of fault objects.")
    parser.add_argument("--json", action="store_true", help="Print one JSON line with the endpoints.")
    parser.add_argument("--no-iceberg", action="store_true", help="Skip the Iceberg mirror and REST facade.")
    parser.add_argument("--iceberg-lag", type=float, default=2.0, help="Emulated UniForm conversion lag (s).")
    parser.add_argument("--per-stream-mb-s", type=float, default=None, help="Per-stream throttle.")
    parser.add_argument("--daemon", action="store_true", help="Run as the warehouse's shared emulator.")
    parser.add_argument("--state-dir", default=None, help="--daemon: the local state folder.")
    parser.add_argument("--idle-shutdown", type=float, default=300.0, help="--daemon: idle seconds to exit.")
    parser.add_argument(
        "--config-stdin", action="store_true", help="--daemon: read the whole ZerobusConfig JSON from stdin."
    )
    parser.add_argument(
        "--prefer-ports", default=None, help="--daemon: GRPC,HTTP ports to try first (a dead daemon's)."
    )
    parser.add_argument(
        "--enable-faults", action="store_true", help="Let POST /_emulator/faults arm faults (tests only)."
    )
    parser.add_argument(
        INSECURE_FLAG,
        action="store_true",
        help="Serve with the well-known default client secret instead of the warehouse's own (insecure).",
    )
    args = parser.parse_args(argv)
    keep_freed_memory()  # this process is the emulator's own (own_process.py)
    if args.daemon:
        sys.exit(_run_daemon(args, credentials_for))
    config = _emulator_config(args)
    faults = load_faults(args.faults) if args.faults else None
    run(
        args.warehouse,
        config,
        faults,
        as_json=args.json,
        iceberg=not args.no_iceberg,
        insecure_well_known_secret=args.insecure_well_known_secret,
    )


def _emulator_config(args: argparse.Namespace, **extra: Any) -> EmulatorConfig:
    """The emulator settings the ``serve`` options give, plus ``extra`` fields."""
    return EmulatorConfig(
        host=args.host,
        port=args.port,
        token_port=args.token_port,
        time_to_table_s=args.time_to_table,
        iceberg_lag_s=args.iceberg_lag,
        per_stream_mb_s=args.per_stream_mb_s,
        max_streams_per_table=args.max_streams_per_table,
        faults_enabled=args.enable_faults,
        **extra,
    )


def _run_daemon(args: argparse.Namespace, credentials_for: CredentialsFor | None) -> int:
    from zerobus_orchestration.emulator.daemon import run_daemon

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    if args.config_stdin:
        config = ZerobusConfig.model_validate_json(sys.stdin.read())
    else:
        config = ZerobusConfig(
            warehouse=args.warehouse,
            state_dir=args.state_dir,
            emulator=_emulator_config(args, mode="daemon", idle_shutdown_s=args.idle_shutdown),
        )
    prefer = None
    if args.prefer_ports:
        grpc_port, _, http_port = args.prefer_ports.partition(",")
        prefer = (int(grpc_port), int(http_port))
    if credentials_for is None and config.credential_vending.enabled:
        # Serving the warehouse's own keys to every reader instead would be a silent downgrade.
        sys.stderr.write(
            "zerobus.credential_vending is enabled, and this entry point serves without vending; "
            "start the shared emulator with: python -m zerobus_orchestration.runtime.embedded --daemon ...\n"
        )
        return 2
    credentials = None if credentials_for is None else credentials_for(config)
    return run_daemon(config, as_json=args.json, prefer_ports=prefer, credentials=credentials)
