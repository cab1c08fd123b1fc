"""``emulator.mode``: the core default, the environment switch, and the orchestrators' default."""

from __future__ import annotations

from zerobus_orchestration.config import ZerobusConfig, load_config


def test_core_default_is_in_process_and_env_selects_daemon() -> None:
    assert load_config(environ={}).emulator.mode == "in_process"
    cfg = load_config(environ={"ZEROBUS_EMULATOR__MODE": "daemon", "ZEROBUS_EMULATOR__IDLE_SHUTDOWN_S": "5"})
    assert cfg.emulator.mode == "daemon"
    assert cfg.emulator.idle_shutdown_s == 5.0


def test_orchestrator_default_applies_only_when_no_mode_was_set() -> None:
    unset = load_config(environ={})
    assert unset.with_default_emulator_mode("daemon").emulator.mode == "daemon"
    assert unset.with_default_emulator_mode("daemon").config_hash() != unset.config_hash()
    explicit = load_config(environ={"ZEROBUS_EMULATOR__MODE": "in_process"})
    assert explicit.with_default_emulator_mode("daemon").emulator.mode == "in_process"
    remote = ZerobusConfig(
        endpoint="https://x.zerobus.example", workspace_url="https://w", client_id="i", client_secret="s"
    )
    assert remote.with_default_emulator_mode("daemon") is remote
