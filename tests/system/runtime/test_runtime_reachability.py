"""A runtime on a remote endpoint contacts it once at start, bounded by ``zerobus.connect_timeout_s``,
and fails naming the URL, the setting and the cause (real sockets on 127.0.0.1: a closed port, a silent
listener; a real emulator for the token endpoint and the gRPC answer)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig, load_config
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ConfigError, CredentialsRefusedError
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.transport.reachability import EndpointUnreachableError, probe_remote

SECRET = "sp-secret-never-shown"


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: bound then released, so a connect is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that accepts TCP (the kernel completes the handshake) and never answers a request."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def remote(tmp_path: Path, endpoint_port: int, workspace_port: int, **settings: object) -> ZerobusConfig:
    return ZerobusConfig(
        endpoint=f"http://127.0.0.1:{endpoint_port}",
        workspace_url=f"http://127.0.0.1:{workspace_port}",
        client_id="sp",
        client_secret=SECRET,
        warehouse=str(tmp_path / "wh"),
        **settings,  # type: ignore[arg-type]
    )


@pytest.fixture(autouse=True)
def _no_runtime_left() -> Iterator[None]:
    yield
    close_all_runtimes()


def test_connect_timeout_is_a_setting_with_a_short_default() -> None:
    assert load_config(environ={}).connect_timeout_s == 10.0
    assert load_config(environ={"ZEROBUS_CONNECT_TIMEOUT_S": "0.5"}).connect_timeout_s == 0.5


def test_refused_endpoint_and_token_endpoint_fail_at_start_naming_both_urls(
    tmp_path: Path, closed_port: int
) -> None:
    config = remote(tmp_path, closed_port, closed_port, connect_timeout_s=2.0)
    with pytest.raises(EndpointUnreachableError) as caught:
        acquire_runtime(config)
    message = str(caught.value)
    assert (
        f"Zerobus endpoint http://127.0.0.1:{closed_port} (zerobus.endpoint (ZEROBUS_ENDPOINT)) unreachable: "
        "connection refused"
    ) in message
    assert f"OAuth token request to http://127.0.0.1:{closed_port}/oidc/v1/token" in message
    assert "zerobus.connect_timeout_s = 2 s" in message
    assert caught.value.timeout_s == 2.0 and caught.value.retriable
    assert SECRET not in message


def test_a_token_endpoint_that_never_answers_fails_after_the_connect_timeout(
    tmp_path: Path, silent_port: int
) -> None:
    # The listener's backlog accepts both connections; the token request and the endpoint's gRPC question
    # then wait for answers that never come, at once, bounded by the setting rather than the SDKs' budget.
    config = remote(tmp_path, silent_port, silent_port, connect_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError) as caught:
        acquire_runtime(config)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert f"OAuth token request to http://127.0.0.1:{silent_port}/oidc/v1/token" in message
    assert "failed: no answer within 0.3 s" in message  # the timeout that acted is the configured one
    assert "accepted a connection but did not answer a gRPC request within 0.3 s" in message
    assert caught.value.timeout_s == 0.3
    assert elapsed < 0.6 * 2  # both probes ran at once: one timeout, not one per probe


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(str(tmp_path / "emu"), EmulatorConfig(), iceberg=False) as emu:
        yield emu


def test_an_endpoint_that_accepts_tcp_and_never_answers_fails_at_start_naming_url_and_setting(
    tmp_path: Path, silent_port: int, emulator: Emulator
) -> None:
    """The token endpoint works (a real emulator's); the Zerobus endpoint completes the TCP handshake and
    then says nothing, which a TCP probe took for reachable: the write then spent 61 s in the pool (the
    SDK's connection timeout twice) and failed with "no healthy stream within 30.0s", naming neither."""
    config = ZerobusConfig(
        endpoint=f"http://127.0.0.1:{silent_port}",
        workspace_url=emulator.workspace_url,
        client_id=emulator.client_id,
        client_secret=emulator.client_secret,
        warehouse=str(tmp_path / "wh"),
    )  # the default connect_timeout_s (10 s): the first failure must come within 15 s
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError) as caught:
        acquire_runtime(config).write("main.raw.t", pa.table({"a": [1]}), source="s")
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert message.startswith(
        f"Zerobus endpoint http://127.0.0.1:{silent_port} (zerobus.endpoint (ZEROBUS_ENDPOINT)) accepted a "
        "connection but did not answer a gRPC request within 10 s"
    ), message
    assert "OAuth token" not in message  # only what failed
    assert caught.value.retriable  # an endpoint that is down now may answer the next try
    assert elapsed < 15.0


def test_a_wrong_client_secret_is_a_credentials_error_naming_the_client_id_not_retriable(
    tmp_path: Path, emulator: Emulator
) -> None:
    """HTTP 401 ``invalid_client`` from the token endpoint: before, ``EndpointUnreachableError`` with
    ``retriable=True``, so an orchestrator retried a secret that cannot start working by itself."""
    config = ZerobusConfig(
        endpoint=emulator.endpoint,
        workspace_url=emulator.workspace_url,
        client_id=emulator.client_id,
        client_secret=SECRET,
        warehouse=str(tmp_path / "wh"),
    )
    with pytest.raises(CredentialsRefusedError) as caught:
        acquire_runtime(config)
    error = caught.value
    assert not error.retriable
    assert error.client_id == emulator.client_id
    assert error.token_url == f"{emulator.workspace_url}/oidc/v1/token"
    message = str(error)
    assert f"for client ID {emulator.client_id!r} refused: HTTP 401 (invalid_client" in message
    assert "ZEROBUS_CLIENT_SECRET" in message  # the setting to fix
    assert SECRET not in message


def test_a_remote_config_without_workspace_url_names_the_setting(tmp_path: Path, closed_port: int) -> None:
    with pytest.raises(ConfigError, match="workspace_url"):
        load_config(
            environ={},
            endpoint=f"http://127.0.0.1:{closed_port}",
            client_id="sp",
            client_secret=SECRET,
            warehouse=str(tmp_path / "wh"),
        )
    # Built around the validator (as a caller holding a partial config might), the probe still names it.
    partial = ZerobusConfig.model_construct(
        endpoint=f"http://127.0.0.1:{closed_port}", workspace_url=None, client_id="sp"
    )
    with pytest.raises(ConfigError, match=r"zerobus\.workspace_url \(unset\)"):
        probe_remote(partial)
