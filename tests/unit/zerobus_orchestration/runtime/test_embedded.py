"""Embedded mode without the ``emulator`` extra fails at once, naming the extra to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.runtime.embedded import EmulatorNotInstalledError, require_emulator
from zerobus_orchestration.runtime.facade import ZerobusRuntime

STUBS = "zerobus_orchestration.emulator.proto.zerobus_service_pb2_grpc"


@pytest.fixture
def without_grpc(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as an install without grpcio: ``import grpc`` raises ImportError."""
    monkeypatch.setitem(sys.modules, "grpc", None)  # None in sys.modules makes the import fail
    monkeypatch.delitem(sys.modules, STUBS, raising=False)  # imported earlier: make it import again


@pytest.mark.usefixtures("without_grpc")
@pytest.mark.parametrize("mode", ["in_process", "daemon"])
def test_embedded_mode_without_the_emulator_extra_names_the_fix(tmp_path: Path, mode: str) -> None:
    config = ZerobusConfig(warehouse=str(tmp_path / "wh"), emulator={"mode": mode})
    with pytest.raises(EmulatorNotInstalledError) as caught:
        ZerobusRuntime(config)
    message = str(caught.value)
    assert "pip install 'zerobus-orchestration[emulator]'" in message
    assert "zerobus.endpoint" in message  # the other way out: write to Databricks
    assert isinstance(caught.value, ConfigError)
    # The fault acted: the missing grpc module is what was reported, not some other import error.
    assert isinstance(caught.value.__cause__, ImportError)
    assert "grpc" in str(caught.value.__cause__)
    # Nothing was started: no daemon advertisement, no WAL.
    assert not (tmp_path / "wh" / "_zerobus" / "emulator.json").exists()


def test_with_the_extra_installed_the_check_passes() -> None:
    require_emulator()
