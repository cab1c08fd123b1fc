"""A runtime on a remote endpoint contacts it once at start, bounded by ``zerobus.connect_timeout_s``,
and fails naming the URL and the cause (real sockets on 127.0.0.1: a closed port, a silent listener)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerobus_orchestration.config import ZerobusConfig, load_config
from zerobus_orchestration.errors import ConfigError
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
    assert f"Zerobus endpoint http://127.0.0.1:{closed_port} unreachable: connection refused" in message
    assert f"OAuth token request to http://127.0.0.1:{closed_port}/oidc/v1/token" in message
    assert "zerobus.connect_timeout_s = 2 s" in message
    assert caught.value.timeout_s == 2.0 and caught.value.retriable
    assert SECRET not in message


def test_a_token_endpoint_that_never_answers_fails_after_the_connect_timeout(
    tmp_path: Path, silent_port: int
) -> None:
    # The endpoint's TCP probe reaches the listener (its backlog accepts); the token request then waits
    # for an answer that never comes, bounded by the setting rather than the SDKs' retry budget.
    config = remote(tmp_path, silent_port, silent_port, connect_timeout_s=0.3)
    with pytest.raises(EndpointUnreachableError) as caught:
        acquire_runtime(config)
    message = str(caught.value)
    assert f"OAuth token request to http://127.0.0.1:{silent_port}/oidc/v1/token" in message
    assert "failed: no answer within 0.3 s" in message  # the timeout that acted is the configured one
    assert f"Zerobus endpoint http://127.0.0.1:{silent_port} unreachable" not in message
    assert caught.value.timeout_s == 0.3


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
