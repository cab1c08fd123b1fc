"""One local-URI check and one state-folder resolver, shared by every layer that needs them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerobus_orchestration.config import STATE_DIR_NAME, ZerobusConfig
from zerobus_orchestration.locations import absolute_state_dir, absolute_warehouse, is_local, local_path


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("/data/warehouse", True),
        ("relative/warehouse", True),
        ("file:///data/warehouse", True),
        ("s3://bucket/prefix", False),
        ("s3a://bucket/prefix", False),
        ("gs://bucket", False),
    ],
)
def test_is_local(uri: str, local: bool) -> None:
    assert is_local(uri) is local


def test_local_path_drops_only_the_file_scheme() -> None:
    assert local_path("file:///data/wh") == "/data/wh"
    assert local_path("/data/wh") == "/data/wh"
    assert local_path("s3://b/p") == "s3://b/p"


def test_absolute_warehouse_resolves_paths_and_keeps_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_warehouse("wh") == str(tmp_path / "wh")
    assert absolute_warehouse("s3://b/p") == "s3://b/p"
    assert absolute_warehouse("file:///x/wh") == "file:///x/wh"


def test_state_dir_is_absolute_and_follows_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_state_dir(ZerobusConfig(warehouse="wh").state_path) == tmp_path / "wh" / STATE_DIR_NAME
    assert (
        absolute_state_dir(ZerobusConfig(warehouse=f"file://{tmp_path}/wh").state_path)
        == tmp_path / "wh" / STATE_DIR_NAME
    )
    assert absolute_state_dir(ZerobusConfig(warehouse="wh", state_dir="st").state_path) == tmp_path / "st"
    remote = absolute_state_dir(ZerobusConfig(warehouse="s3://bucket/prefix").state_path)
    assert remote.is_absolute() and os.fspath(remote) == os.path.abspath(
        ZerobusConfig(warehouse="s3://bucket/prefix").state_path
    )


def test_daemon_resolves_the_same_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's files and the config it hands its child use the one resolver (they once had copies)."""
    import json

    from zerobus_orchestration.emulator.daemon import config_for_daemon, daemon_paths

    monkeypatch.chdir(tmp_path)
    cfg = ZerobusConfig(warehouse="file://wh", state_dir="st")
    assert daemon_paths(cfg).state == absolute_state_dir(cfg.state_path) == tmp_path / "st"
    sent = json.loads(config_for_daemon(cfg))
    assert sent["state_dir"] == str(tmp_path / "st")
    assert sent["warehouse"] == str(tmp_path / "wh")
