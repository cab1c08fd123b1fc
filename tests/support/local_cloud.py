"""The "local cloud" for many-machine tests: ``zerobus-orch serve --json`` as a subprocess, and the
environments of the processes that use it as production would (only the ``ZEROBUS_*`` variables of the
production path, a state folder and an empty warehouse of their own); ``run_cli`` runs the installed
``zerobus-orch`` in such an environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLI = str(Path(sys.executable).with_name("zerobus-orch"))


def run_cli(env: Mapping[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The installed ``zerobus-orch *args`` with exactly ``env``, its output captured as text; a failing
    exit is the caller's to assert (``check=False``), with the stderr it printed."""
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def clean_env(*extra_prefixes: str) -> dict[str, str]:
    """This process's environment minus every setting of ours (``ZEROBUS_*``, plus ``extra_prefixes``),
    the proxies (the official SDK would tunnel 127.0.0.1 through them) and any Databricks profile."""
    prefixes = ("ZEROBUS_", "DATABRICKS_", *extra_prefixes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["DATABRICKS_CONFIG_FILE"] = "/nonexistent/databrickscfg"  # no developer profile leaks in
    return env


@contextmanager
def serve(warehouse: str, env: dict[str, str], *args: str) -> Iterator[dict[str, object]]:
    """``zerobus-orch serve --json [args]`` on ``warehouse`` with exactly ``env``; yields the line it
    printed (endpoint, workspace URL, client id, SQL warehouse id, warehouse), and SIGTERMs it after,
    expecting a clean exit."""
    command = [CLI, "serve", "--warehouse", warehouse, "--json", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


@dataclass(frozen=True)
class Cloud:
    info: Mapping[str, object]  # what ``serve --json`` printed
    # Object-store options every process names (endpoint, region), no keys.
    store: dict[str, str] = field(default_factory=dict)
    admin: dict[str, str] | None = None  # the store's admin keys, for the test's own checks


def production_env(
    info: Mapping[str, object], secret: str, root: Path, store_options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``ZEROBUS_*`` variables of a worker on the production path against the served ``info``: remote
    endpoint, OAuth M2M client, ``unity`` catalog with the SQL warehouse, the object store's options, and
    its own state folder ``root/state`` and warehouse ``root/warehouse`` (created here, empty)."""
    (root / "warehouse").mkdir(parents=True)
    return {f"ZEROBUS_STORAGE_OPTIONS__{k}": v for k, v in (store_options or {}).items()} | {
        "ZEROBUS_ENDPOINT": str(info["endpoint"]),
        "ZEROBUS_WORKSPACE_URL": str(info["workspace_url"]),
        "ZEROBUS_CLIENT_ID": str(info["client_id"]),
        "ZEROBUS_CLIENT_SECRET": secret,
        "ZEROBUS_CATALOG__BACKEND": "unity",
        "ZEROBUS_CATALOG__SQL_WAREHOUSE_ID": str(info["sql_warehouse_id"]),
        "ZEROBUS_STATE_DIR": str(root / "state"),
        "ZEROBUS_WAREHOUSE": str(root / "warehouse"),
    }
