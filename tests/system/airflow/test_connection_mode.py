"""Embedded mode only when asked for; ``test_connection`` reaches what a connection points at.

Regression tests for a connection with production credentials but no Host that ran the local emulator
and wrote rows to ``./.zerobus/warehouse`` on the worker, with ``airflow connections test`` saying
"Connection success!". The remote probes run against a real emulator (its gRPC endpoint and its OAuth
token route) and against a port nothing listens on.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.exceptions import ProbeError
from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.utils.connection import ConnectionFields, config_from_connection
from airflow_provider.utils.reachability import reach_endpoint
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ConfigError

SECRET = "canary-secret-5f0c"
WORKSPACE = "https://dbc-1.cloud.databricks.com"
# Keeps an emulator a pre-fix run would start inside the test process (no daemon left behind).
IN_PROCESS = {"emulator": {"mode": "in_process"}}


def _production_no_host(**extra: Any) -> dict[str, Any]:
    return {
        "conn_type": "zerobus",
        "login": "client-id",
        "password": SECRET,
        "extra": {"workspace_url": WORKSPACE, "config": IN_PROCESS, **extra},
    }


def _fields(conn: dict[str, Any], conn_id: str = "zb_prod") -> ConnectionFields:
    return ConnectionFields(
        conn_id=conn_id,
        conn_type=conn.get("conn_type"),
        host=conn.get("host"),
        login=conn.get("login"),
        password=conn.get("password"),
        extra=conn.get("extra", {}),
    )


def _flat(text: str) -> str:
    """Rich and log wrapping aside: one line of single spaces."""
    return re.sub(r"\s+", " ", text)


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("conn", "named"),
    [
        (_production_no_host(), "Password (OAuth client secret)"),
        ({"conn_type": "zerobus", "extra": {"workspace_url": WORKSPACE}}, "extra 'workspace_url'"),
        ({"conn_type": "zerobus", "extra": {"extra__zerobus__warehouse_id": "wh-1"}}, "extra 'warehouse_id'"),
        ({"conn_type": "zerobus", "login": "client-id"}, "Login (OAuth client ID)"),
        (
            {"conn_type": "zerobus", "extra": {"config": {"client_secret": SECRET}}},
            "config extra 'client_secret'",
        ),
    ],
)
def test_production_settings_without_a_host_are_refused(conn: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_connection(_fields(conn))
    message = str(info.value)
    assert "connection 'zb_prod'" in message and named in message
    assert "no Host (Zerobus endpoint)" in message and '"embedded": true' in message
    assert SECRET not in message


@pytest.mark.parametrize("flag", [False, "false", "0"])
def test_embedded_false_without_a_host_is_refused(flag: object) -> None:
    conn = {"conn_type": "zerobus", "extra": {"embedded": flag, "warehouse": "/tmp/wh"}}
    with pytest.raises(ConfigError, match=r"connection 'zb_prod' sets \"embedded\": false but has no Host"):
        config_from_connection(_fields(conn))


def test_embedded_true_with_a_host_is_a_contradiction() -> None:
    conn = {
        "conn_type": "zerobus",
        "host": "https://user:hostpw@1234.zerobus.us-west-2.cloud.databricks.com",
        "login": "client-id",
        "password": SECRET,
        "extra": {"embedded": True, "workspace_url": WORKSPACE},
    }
    with pytest.raises(ConfigError) as info:
        config_from_connection(_fields(conn))
    message = str(info.value)
    assert '"embedded": true and also Host' in message and "1234.zerobus" in message
    assert SECRET not in message and "hostpw" not in message


def test_embedded_is_chosen_by_an_empty_connection_or_explicitly() -> None:
    assert config_from_connection(_fields({"conn_type": "zerobus"})).embedded
    assert config_from_connection(_fields({"conn_type": "zerobus", "extra": {"warehouse": "/w"}})).embedded
    explicit = _production_no_host(embedded=True)  # credentials kept, the emulator chosen on purpose
    assert config_from_connection(_fields(explicit)).embedded


def test_endpoint_in_the_config_extra_is_sent_to_the_host_field() -> None:
    conn = {"conn_type": "zerobus", "extra": {"config": {"endpoint": "https://zb.example.com"}}}
    with pytest.raises(ConfigError, match="belongs in the Host field"):
        config_from_connection(_fields(conn))


@pytest.mark.parametrize("host", [None, "https://dbc-1.cloud.databricks.com"])
def test_a_databricks_connection_is_refused_by_the_zerobus_hook(
    monkeypatch: pytest.MonkeyPatch, host: str | None
) -> None:
    conn = {"conn_type": "databricks", "login": "client-id", "password": SECRET}
    if host:
        conn["host"] = host
    monkeypatch.setenv("AIRFLOW_CONN_DBX", json.dumps(conn))
    with pytest.raises(ConfigError) as info:
        ZerobusHook(zerobus_conn_id="dbx").get_config()
    message = str(info.value)
    assert "connection 'dbx' has type 'databricks', not 'zerobus'" in message
    assert "Host is the workspace" in message and SECRET not in message


def test_hook_test_connection_refuses_production_credentials_without_a_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_ZB_PROD", json.dumps(_production_no_host()))
    ok, message = ZerobusHook(zerobus_conn_id="zb_prod").test_connection()
    assert not ok and "no Host (Zerobus endpoint)" in message and SECRET not in message
    assert not (tmp_path / ".zerobus").exists()


def test_ingest_with_production_credentials_and_no_host_fails_before_writing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reported incident: the task went green and 5,000 rows landed in ./.zerobus/warehouse."""
    work = tmp_path / "worker"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("AIRFLOW_CONN_ZB_PROD", json.dumps(_production_no_host()))
    pq.write_table(pa.table({"id": pa.array(range(50), pa.int64())}), tmp_path / "orders.parquet")
    task = ZerobusIngestOperator(
        task_id="ingest",
        table="main.raw.prod_orders",
        path=str(tmp_path / "orders.parquet"),
        zerobus_conn_id="zb_prod",
    )
    context: Any = {"run_id": "r1", "ti": SimpleNamespace(map_index=-1, run_id="r1")}
    with pytest.raises(AirflowFailException) as info:
        task.execute(context)
    assert "no Host (Zerobus endpoint)" in str(info.value) and SECRET not in str(info.value)
    assert list(work.iterdir()) == []  # no ./.zerobus: no warehouse, no coverage, no WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.parquet", "worker"]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(str(tmp_path / "emu"), EmulatorConfig(), iceberg=False) as emu:
        yield emu


def _remote(
    monkeypatch: pytest.MonkeyPatch, host: str, workspace_url: str, login: str, password: str, **extra: Any
) -> None:
    conn = {
        "conn_type": "zerobus",
        "host": host,
        "login": login,
        "password": password,
        "extra": {"workspace_url": workspace_url, "warehouse_id": "wh-1", **extra},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ZB_REMOTE", json.dumps(conn))


def test_test_connection_reaches_the_endpoint_and_gets_a_token(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    _remote(
        monkeypatch, emulator.endpoint, emulator.workspace_url, emulator.client_id, emulator.client_secret
    )
    hook = ZerobusHook(zerobus_conn_id="zb_remote")
    ok, message = hook.test_connection()
    assert ok, message
    assert f"Zerobus endpoint {emulator.endpoint} answered the gRPC health check over HTTP/2" in message
    assert f"OAuth token issued by {emulator.workspace_url}/oidc/v1/token" in message
    assert emulator.client_secret not in message
    assert not hook.runtime_acquired  # probing does not open a stream pool


def test_test_connection_fails_without_the_sql_warehouse_every_task_needs(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    secret = emulator.client_secret
    _remote(
        monkeypatch, emulator.endpoint, emulator.workspace_url, emulator.client_id, secret, warehouse_id=""
    )
    ok, message = ZerobusHook(zerobus_conn_id="zb_remote").test_connection()
    assert not ok and "extra 'warehouse_id'" in message and "answered the gRPC health check" in message


def test_test_connection_reports_a_rejected_secret_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    _remote(monkeypatch, emulator.endpoint, emulator.workspace_url, emulator.client_id, SECRET)
    ok, message = ZerobusHook(zerobus_conn_id="zb_remote").test_connection()
    assert not ok
    assert f"OAuth token request to {emulator.workspace_url}/oidc/v1/token" in message
    assert "HTTP 401" in message and "invalid_client" in message
    assert "answered" not in message  # only failures are listed when something failed
    assert SECRET not in message


def test_test_connection_names_every_unreachable_url(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, workspace = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    _remote(monkeypatch, endpoint, workspace, "client-id", SECRET)
    ok, message = ZerobusHook(zerobus_conn_id="zb_remote").test_connection()
    assert not ok
    assert (
        f"Zerobus endpoint {endpoint} (zerobus.endpoint (ZEROBUS_ENDPOINT)) unreachable: connection refused"
        in (message)
    )
    assert f"OAuth token request to {workspace}/oidc/v1/token" in message
    assert message.count("refused") == 2 and SECRET not in message


def test_test_connection_fails_for_an_address_that_accepts_tcp_and_never_answers(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    """A listener that completes the TCP handshake and says nothing: "Connection success!" before (a TCP
    connect was all the test did), though every task then hung in the write. Now the endpoint must
    answer a gRPC request, and the token must be issued."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        _remote(
            monkeypatch,
            endpoint,
            emulator.workspace_url,
            emulator.client_id,
            emulator.client_secret,
            config={"connect_timeout_s": 1.0},
        )
        ok, message = ZerobusHook(zerobus_conn_id="zb_remote").test_connection()
    assert not ok
    assert (
        f"Zerobus endpoint {endpoint} (zerobus.endpoint (ZEROBUS_ENDPOINT)) accepted a connection but did "
        "not answer a gRPC request within 1 s"
    ) in message
    assert emulator.client_secret not in message


def test_test_connection_says_the_embedded_emulator_is_local(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conn = {"conn_type": "zerobus", "extra": {"embedded": True, "warehouse": str(tmp_path / "wh")}}
    conn["extra"]["config"] = IN_PROCESS
    monkeypatch.setenv("AIRFLOW_CONN_ZB_LOCAL", json.dumps(conn))
    ok, message = ZerobusHook(zerobus_conn_id="zb_local").test_connection()
    assert ok and "embedded emulator" in message and "not Databricks" in message
    assert str((tmp_path / "wh").resolve()) in message


@pytest.mark.slow  # the airflow CLI in its own process
def test_airflow_connections_test_cli_fails_for_credentials_without_a_host(tmp_path: Path) -> None:
    """Through Airflow's own machinery: the CLI, the env-var secrets backend, ``Connection.get_hook``."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        AIRFLOW__CORE__TEST_CONNECTION="Enabled",
        AIRFLOW_CONN_ZB_PROD=json.dumps(_production_no_host()),
    )
    airflow = Path(sys.executable).with_name("airflow")
    done = subprocess.run(
        [str(airflow), "connections", "test", "zb_prod"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = _flat(done.stdout + done.stderr)
    assert done.returncode == 1, output
    assert "Connection failed!" in output and "Connection success!" not in output
    assert "connection 'zb_prod'" in output and "no Host (Zerobus endpoint)" in output
    assert SECRET not in output
    assert list(tmp_path.iterdir()) == []  # no emulator, no ./.zerobus


class _ConnectProxy:
    """A one-connection-at-a-time HTTP CONNECT proxy on loopback that records what it was asked for; with
    a 200 status it tunnels to ``target`` (host, port), whatever the request named."""

    def __init__(self, status: str, target: tuple[str, int] | None = None) -> None:
        self.status = status
        self.target = target
        self.requests: list[str] = []
        self._closing = False
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            conn, _ = self._sock.accept()
            if self._closing:
                conn.close()
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    head += chunk
                self.requests.append(head.decode().splitlines()[0] if head else "")
                if self.target is None or not self.status.startswith("200"):
                    conn.sendall(f"HTTP/1.1 {self.status}\r\nContent-Length: 0\r\n\r\n".encode())
                    continue
                conn.sendall(f"HTTP/1.1 {self.status}\r\n\r\n".encode())
                _relay(conn, socket.create_connection(self.target, timeout=5))

    def close(self) -> None:
        self._closing = True  # a last connection wakes the blocked accept() so the thread ends
        socket.create_connection(self._sock.getsockname(), timeout=5).close()
        self._thread.join(timeout=5)
        self._sock.close()


def _relay(client: socket.socket, server: socket.socket) -> None:
    """Copy bytes both ways until either side closes (the proxy's tunnel)."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            dst.close()

    back = threading.Thread(target=pump, args=(server, client), daemon=True)
    back.start()
    pump(client, server)
    back.join(timeout=5)


@pytest.mark.parametrize("status", ["200 Connection established", "403 Forbidden"])
def test_endpoint_probe_goes_through_the_proxy_the_sdk_would_use(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator, status: str
) -> None:
    """The gRPC question goes through the tunnel: the proxy says 200 and relays to the emulator, which
    answers over HTTP/2; a proxy that refuses the CONNECT is named with its answer."""
    target = socket.getaddrinfo("127.0.0.1", int(emulator.endpoint.rsplit(":", 1)[1]))[0][4][:2]
    proxy = _ConnectProxy(status, target=target)
    try:
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", proxy.url)
        endpoint = "http://1234.zerobus.example.invalid"
        if status.startswith("200"):
            reached = reach_endpoint(endpoint, timeout_s=5)
            assert "answered the gRPC health check over HTTP/2" in reached and "through proxy" in reached
        else:
            with pytest.raises(ProbeError, match=r"unreachable through proxy .*403"):
                reach_endpoint(endpoint, timeout_s=5)
        assert [r.rsplit(" ", 1)[0] for r in proxy.requests] == ["CONNECT 1234.zerobus.example.invalid:80"]
    finally:
        proxy.close()
