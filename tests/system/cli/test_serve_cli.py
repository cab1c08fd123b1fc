"""``zerobus-orch serve`` in the foreground: prints its addresses, serves the SDK, commits on SIGTERM; never
with the well-known client secret unless told ``--insecure-well-known-secret`` (it generates the
warehouse's own and prints where it is)."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from zerobus import ZerobusSdk
from zerobus.sdk.shared import TableProperties

from tests.support.emulator_helpers import TABLE, create_table, read_table, row_options

pytestmark = pytest.mark.integration


def _serve(warehouse: Path, *args: str, human: bool = False) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("ZEROBUS_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    cli = Path(sys.executable).with_name("zerobus-orch")
    command = [str(cli), "serve", "--warehouse", str(warehouse), "--no-iceberg", "--token-port", "0", *args]
    command += [] if human else ["--json"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def _token_status(token_url: str, client_id: str, secret: str) -> int:
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    request = urllib.request.Request(
        token_url,
        data=b"grant_type=client_credentials&scope=all-apis",
        headers={"Authorization": f"Basic {basic}"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_command_runs_the_emulator_until_sigterm_with_the_warehouse_s_own_secret(
    tmp_path: Path,
) -> None:
    """Before, serve minted tokens for the well-known default secret (a warning only): any local user
    could write. Now it generates the warehouse's secret, owner-only, and prints where it is."""
    warehouse = tmp_path / "wh"
    create_table(warehouse)
    proc = _serve(warehouse)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["endpoint"].startswith("http://127.0.0.1:")
        assert info["iceberg_rest_uri"] == info["workspace_url"] + "/api/2.1/unity-catalog/iceberg-rest"
        secret_file = Path(info["client_secret_file"])
        assert secret_file == warehouse / "_zerobus" / "emulator.secret"
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = secret_file.read_text().strip()
        assert secret and secret not in json.dumps(info)  # where it is, never what it is
        assert (
            _token_status(info["workspace_url"] + "/oidc/v1/token", "zerobus-local", "zerobus-local-secret")
            == 401
        )
        sdk = ZerobusSdk(info["endpoint"], info["token_url"])
        stream = sdk.create_stream("zerobus-local", secret, TableProperties(TABLE), row_options())
        stream.wait_for_offset(stream.ingest_records_offset([{"id": 1}, {"id": 2}]))
        stream.close()
    finally:
        _stop(proc)
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]


def test_serve_prints_where_the_secret_is_and_how_to_export_it(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    proc = _serve(warehouse, human=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(9)]
    finally:
        _stop(proc)
    secret_file = warehouse / "_zerobus" / "emulator.secret"
    text = "".join(lines)
    assert f"client secret     in {secret_file} (generated for this warehouse, owner-only)" in text
    assert f'export ZEROBUS_CLIENT_ID=zerobus-local ZEROBUS_CLIENT_SECRET="$(cat {secret_file})"' in text
    assert secret_file.read_text().strip() not in text


def test_the_well_known_secret_only_when_asked_for(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    proc = _serve(warehouse, "--insecure-well-known-secret")
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["client_secret_file"] is None
        assert (
            _token_status(info["workspace_url"] + "/oidc/v1/token", "zerobus-local", "zerobus-local-secret")
            == 200
        )
    finally:
        _stop(proc)
