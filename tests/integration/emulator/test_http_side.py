"""The emulator's HTTP port: OAuth token endpoint, Iceberg REST routing and the test hooks."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.emulator_helpers import SCHEMA, TABLE, events, open_arrow, read_table
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.errors import AuthFailure
from zerobus_orchestration.emulator.server import Emulator

DETAILS = [
    {
        "type": "unity_catalog_privileges",
        "privileges": ["USE CATALOG"],
        "object_type": "CATALOG",
        "object_full_path": "main",
    },
    {
        "type": "unity_catalog_privileges",
        "privileges": ["USE SCHEMA"],
        "object_type": "SCHEMA",
        "object_full_path": "main.default",
    },
    {
        "type": "unity_catalog_privileges",
        "privileges": ["SELECT", "MODIFY"],
        "object_type": "TABLE",
        "object_full_path": TABLE,
        "operations": ["zerobuswrite"],
    },
]


def request(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=body, headers=headers or {}, method="POST" if body is not None else "GET"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def token_request(
    emu: Emulator, secret: str, details: list[dict[str, Any]] | None = DETAILS
) -> tuple[int, Any]:
    form = {
        "grant_type": "client_credentials",
        "scope": "all-apis",
        "resource": "api://databricks/workspaces/127/zerobusDirectWriteApi",
    }
    if details is not None:
        form["authorization_details"] = json.dumps(details)
    basic = base64.b64encode(f"{emu.client_id}:{secret}".encode()).decode()
    return request(
        emu.token_url + "/oidc/v1/token",
        urlencode(form).encode(),
        {"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
    )


def test_token_endpoint_issues_a_table_scoped_expiring_token(emulator: Emulator) -> None:
    status, body = token_request(emulator, emulator.client_secret)
    assert status == 200
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
    emulator.issuer.authorize(f"Bearer {body['access_token']}", TABLE)
    with pytest.raises(AuthFailure) as info:
        emulator.issuer.authorize(f"Bearer {body['access_token']}", "main.default.other")
    assert info.value.code == "PERMISSION_DENIED"


def test_token_without_details_is_a_workspace_token(emulator: Emulator) -> None:
    status, body = token_request(emulator, emulator.client_secret, details=None)
    assert status == 200
    emulator.issuer.authorize(f"Bearer {body['access_token']}", "any.table.at_all")


def test_wrong_secret_is_401_and_secret_is_not_echoed(emulator: Emulator) -> None:
    status, body = token_request(emulator, "guess")
    assert status == 401 and body["error"] == "invalid_client"
    assert emulator.client_secret not in json.dumps(body)


def test_short_lived_tokens_expire(warehouse: Path) -> None:
    config = EmulatorConfig(token_ttl_s=1)
    with Emulator(str(warehouse), config, iceberg=False) as emu:
        token = emu.issue_token(TABLE, ttl_s=0.0)
        with pytest.raises(AuthFailure, match="expired") as info:
            emu.issuer.authorize(f"Bearer {token}", TABLE)
        assert info.value.code == "UNAUTHENTICATED"


def test_http_hooks_materialize_and_arm_faults(warehouse: Path) -> None:
    config = EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0, faults_enabled=True)
    with Emulator(str(warehouse), config, iceberg=False) as emulator:
        auth = {"Authorization": f"Bearer {emulator.issue_token()}"}
        assert request(emulator.workspace_url + "/_emulator/health") == (200, {"status": "ok"})
        fault = {"kind": "reject_open", "status": "UNAVAILABLE", "table": TABLE}
        url = emulator.workspace_url + "/_emulator/faults"
        status, body = request(url, json.dumps(fault).encode(), auth)
        assert status == 200 and body["armed"]["kind"] == "reject_open"
        assert [f.kind.value for f in emulator.faults.pending()] == ["reject_open"]
        assert request(url, b'{"kind": "nope"}', auth)[0] == 400
        emulator.faults.clear()
        stream = open_arrow(emulator, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([1])))
        stream.close()
        status, body = request(emulator.workspace_url + f"/_emulator/materialize?table={TABLE}", b"", auth)
        assert status == 200
        assert read_table(warehouse).num_rows == 1


def test_iceberg_rest_without_the_facade_answers_503(emulator: Emulator) -> None:
    auth = {"Authorization": f"Bearer {emulator.issue_token()}"}
    status, body = request(emulator.iceberg_rest_uri + "/v1/config", headers=auth)
    assert status == 503 and "Iceberg REST facade" in body["error"]["message"]


def test_iceberg_rest_is_routed_to_the_mirror_facade(warehouse: Path) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    config = EmulatorConfig(time_to_table_s=3600, iceberg_lag_s=0.0)  # materialise explicitly
    with Emulator(str(warehouse), config) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([1, 2, 3])))
        stream.close()
        version = emu.materialize_now(TABLE)
        assert version is not None
        assert emu.mirror is not None and emu.mirror.sync_now(TABLE) >= version
        token = emu.issue_token()
        auth = {"Authorization": f"Bearer {token}"}
        status, _ = request(emu.iceberg_rest_uri + "/v1/config?warehouse=main", headers=auth)
        assert status == 200
        catalog = RestCatalog("uc", uri=emu.iceberg_rest_uri, warehouse="main", token=token)
        table = catalog.load_table("default.events")
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_a_port_in_use_fails_start_cleanly(emulator: Emulator, tmp_path: Path) -> None:
    from zerobus_orchestration.emulator.errors import EmulatorError

    clash = Emulator(str(tmp_path / "other"), EmulatorConfig(port=emulator.port), iceberg=False)
    with pytest.raises(EmulatorError, match=f"cannot bind the gRPC port 127.0.0.1:{emulator.port}"):
        clash.start()
    assert clash._materializer is None and clash._grpc is None


def test_second_emulator_on_the_same_warehouse_is_refused(emulator: Emulator, warehouse: Path) -> None:
    from zerobus_orchestration.emulator.errors import EmulatorError

    with pytest.raises(EmulatorError, match="another emulator is already running"):
        Emulator(str(warehouse), EmulatorConfig(), iceberg=False).start()
