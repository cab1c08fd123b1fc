"""``zerobus-orch serve`` in the foreground: prints its addresses, serves the SDK, commits on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from zerobus import ZerobusSdk
from zerobus.sdk.shared import TableProperties

from tests.support.emulator_helpers import TABLE, create_table, read_table, row_options

pytestmark = pytest.mark.integration


def test_serve_command_runs_the_emulator_until_sigterm(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    create_table(warehouse)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("ZEROBUS_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    cli = Path(sys.executable).with_name("zerobus-orch")
    command = [
        str(cli),
        "serve",
        "--warehouse",
        str(warehouse),
        "--json",
        "--no-iceberg",
        "--token-port",
        "0",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["endpoint"].startswith("http://127.0.0.1:")
        assert info["iceberg_rest_uri"] == info["workspace_url"] + "/api/2.1/unity-catalog/iceberg-rest"
        assert "secret" not in json.dumps(info)
        sdk = ZerobusSdk(info["endpoint"], info["token_url"])
        stream = sdk.create_stream(
            "zerobus-local", "zerobus-local-secret", TableProperties(TABLE), row_options()
        )
        stream.wait_for_offset(stream.ingest_records_offset([{"id": 1}, {"id": 2}]))
        stream.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]
