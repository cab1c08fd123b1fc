"""The shared daemon vends Iceberg credentials only through the embedded-mode entry point.

Vending is catalog code, which the emulator does not import: ``python -m zerobus_orchestration.runtime.embedded
--daemon`` (what ``emulator.launcher`` starts for the runtime) hands it in; the emulator's own entry
point refuses a config that asks for vending rather than serve the warehouse's keys to every reader.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator import daemon, serve
from zerobus_orchestration.runtime import embedded
from zerobus_orchestration.storage import CredentialCache

ARGS = ["--warehouse", "s3://bucket/wh", "--daemon", "--config-stdin"]


def _vending_config_on_stdin(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    config = ZerobusConfig(
        warehouse="s3://bucket/wh",
        state_dir=str(tmp_path / "state"),
        storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "us-east-1"},
        credential_vending={"enabled": True, "account_id": "123456789012"},
    )
    monkeypatch.setattr(
        "sys.stdin", io.StringIO(daemon.config_for_daemon(config))
    )  # as the launcher sends it


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``run_daemon`` replaced by a recorder of the credentials it would serve with."""
    calls: list[Any] = []

    def record(config: ZerobusConfig, **kwargs: Any) -> int:
        calls.append(kwargs["credentials"])
        return 0

    monkeypatch.setattr(daemon, "run_daemon", record)
    return calls


def test_the_embedded_entry_point_hands_the_daemon_its_credential_vending(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, served: list[Any]
) -> None:
    _vending_config_on_stdin(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exited:
        embedded.daemon_main(ARGS)
    assert exited.value.code == 0
    assert len(served) == 1 and isinstance(served[0], CredentialCache)


def test_the_emulator_entry_point_refuses_to_serve_without_the_vending_it_was_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, served: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _vending_config_on_stdin(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exited:
        serve.main(ARGS)
    assert exited.value.code == 2
    assert served == []  # it never started serving
    assert "python -m zerobus_orchestration.runtime.embedded --daemon" in capsys.readouterr().err
