"""The emulator's HTTP side answers only holders of its credential, and arms faults only when enabled.

Its ports listen on loopback, where every local user reaches them; the client secret is generated per
warehouse and kept owner-only with the rest of the state.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pyarrow as pa
from pydantic import SecretStr

from tests.integration.emulator.test_http_side import request
from tests.support.emulator_helpers import TABLE
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.private import SECRET_FILE, WELL_KNOWN_SECRET, with_warehouse_secret
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.testing.settings import embedded_test_config

FAULT = json.dumps({"kind": "reject_open", "table": TABLE}).encode()


def _routes(emu: Emulator) -> list[tuple[str, bytes | None]]:
    return [
        (emu.workspace_url + "/_emulator/faults", FAULT),
        (emu.workspace_url + f"/_emulator/materialize?table={TABLE}", b""),
        (emu.workspace_url + "/_emulator/materialize", b""),
        (emu.iceberg_rest_uri + "/v1/config?warehouse=main", None),
        (emu.iceberg_rest_uri + "/zerobus/v1/sync/main.default.events", b""),
    ]


def test_control_routes_and_iceberg_rest_refuse_requests_without_a_credential(warehouse: Path) -> None:
    config = EmulatorConfig(time_to_table_s=3600, iceberg_lag_s=0.0, faults_enabled=True)
    with Emulator(str(warehouse), config) as emu:
        forged = base64.b64encode(f"{emu.client_id}:{WELL_KNOWN_SECRET}x".encode()).decode()
        for url, body in _routes(emu):
            for headers in ({}, {"Authorization": "Bearer made-up"}, {"Authorization": f"Basic {forged}"}):
                status, answer = request(url, body, headers)
                assert status == 401, (url, headers, answer)
                assert emu.client_secret not in json.dumps(answer)
        assert emu.faults.pending() == [], "an unauthenticated request armed a fault"
        # The health check (used to tell a live daemon from a stale advertisement) stays open.
        assert request(emu.workspace_url + "/_emulator/health")[0] == 200
        # Either credential is accepted: a token this emulator issued, or the client credentials.
        basic = base64.b64encode(f"{emu.client_id}:{emu.client_secret}".encode()).decode()
        assert request(_routes(emu)[0][0], FAULT, {"Authorization": f"Basic {basic}"})[0] == 200
        token = emu.issue_token()
        assert request(_routes(emu)[3][0], None, {"Authorization": f"Bearer {token}"})[0] == 200
        assert [f.kind.value for f in emu.faults.pending()] == ["reject_open"]


def test_faults_are_refused_unless_the_emulator_was_started_with_them_enabled(emulator: Emulator) -> None:
    assert emulator.config.faults_enabled is False  # the default
    auth = {"Authorization": f"Bearer {emulator.issue_token()}"}
    status, body = request(emulator.workspace_url + "/_emulator/faults", FAULT, auth)
    assert status == 403
    assert "faults_enabled" in body["error"]["message"]
    assert emulator.faults.pending() == []


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_each_warehouse_gets_its_own_owner_only_secret(tmp_path: Path) -> None:
    one, two = (embedded_test_config(tmp_path / name) for name in ("one", "two"))
    first = with_warehouse_secret(one).emulator.client_secret.get_secret_value()
    second = with_warehouse_secret(two).emulator.client_secret.get_secret_value()
    assert first != second
    assert WELL_KNOWN_SECRET not in (first, second)
    # Later processes of the same warehouse read the same secret back (daemon and clients agree).
    assert with_warehouse_secret(one).emulator.client_secret.get_secret_value() == first
    state = tmp_path / "one" / "_zerobus"
    assert _mode(state / SECRET_FILE) == 0o600
    assert _mode(state) == 0o700
    # A secret the config sets explicitly is kept.
    chosen = one.model_copy(
        update={"emulator": one.emulator.model_copy(update={"client_secret": SecretStr("my-own")})}
    )
    assert with_warehouse_secret(chosen).emulator.client_secret.get_secret_value() == "my-own"


def test_an_embedded_runtime_uses_the_warehouse_secret_and_owner_only_state(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the modes must hold under the usual umask, not only a strict one
    try:
        rt = ZerobusRuntime(embedded_test_config(tmp_path / "wh"))
        try:
            rt.write("main.raw.events", pa.table({"id": [1, 2, 3]}), source="s")
            assert rt.emulator is not None
            emu = rt.emulator
            assert isinstance(emu, Emulator)
            state = tmp_path / "wh" / "_zerobus"
            secret = (state / SECRET_FILE).read_text().strip()
            assert emu.client_secret == secret != WELL_KNOWN_SECRET
            assert _mode(state) == 0o700
            assert _mode(state / "wal") == 0o700
            assert _mode(state / "wal" / ".lock") == 0o600
            assert _mode(state / "catalog.sqlite") == 0o600  # created before the emulator started
            # Read-back through the Iceberg facade carries a token the emulator issued.
            assert rt.verify("main.raw.events", source="s").verified
        finally:
            rt.close()
    finally:
        os.umask(previous)
