"""`zerobus-orch demo`: one JSON object on stdout with `--json`, exit status from the read-back verdict, and
the core fallback when no Dagster flavour (the `zerobus_orchestration.demos` entry point) can load."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from zerobus_orchestration.cli.demo import render_summary
from zerobus_orchestration.cli.main import app
from zerobus_orchestration.readback import verify as readback_verify_module

pytestmark = pytest.mark.integration

FAST = {
    "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.1",
    "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2",
    "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
    "ZEROBUS_READBACK__POLL_MAX_S": "0.2",
    "ZEROBUS_READBACK__WAIT_TIMEOUT_S": "30",
}


@pytest.fixture
def fast_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def without_dagster(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on an install without the dagster extra: the demo's Dagster flavour cannot be imported.

    None in sys.modules stops an import; the adapter's modules an earlier test imported are blocked too,
    or the entry point would load the cached `dagster_defs.demo` without importing dagster.
    """
    blocked = ("dagster", "dagster_defs")
    for name in [*blocked, *(m for m in sys.modules if m.split(".")[0] in blocked)]:
        monkeypatch.setitem(sys.modules, name, None)


def _one_json_object(stdout: str) -> dict[str, Any]:
    lines = stdout.splitlines()
    assert len(lines) == 1, f"--json must print exactly one line on stdout, got: {stdout!r}"
    summary = json.loads(lines[0])
    assert isinstance(summary, dict)
    return summary


@pytest.mark.slow
def test_demo_json_prints_one_json_object_and_exits_zero(tmp_path: Path) -> None:
    # A real process through the installed console script: nothing but the summary may reach stdout.
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(FAST, NO_PROXY="127.0.0.1,localhost")
    script = Path(sys.executable).with_name("zerobus-orch")
    done = subprocess.run(
        [str(script), "demo", "--json", "--rows", "300", "--warehouse", str(tmp_path / "warehouse")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    summary = _one_json_object(done.stdout)
    assert summary["mode"] == "dagster"  # the dagster extra is installed: its registered flavour runs
    assert summary["verified"] is True and summary["success"] is True
    assert summary["rows_written"] == 300 and summary["rows_read_back"] == 300


def test_demo_falls_back_to_the_core_demo_without_dagster(
    tmp_path: Path, fast_env: None, without_dagster: None
) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--json", "--rows", "300", "--warehouse", str(tmp_path / "warehouse")]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    summary = _one_json_object(result.stdout)
    assert summary["mode"] == "core"
    assert summary["verified"] is True and summary["rows_written"] == summary["rows_read_back"] == 300
    assert 0 < summary["payload_mb_per_s"] < summary["mb_per_s"]  # the user's bytes, then as sent
    assert "of your data" in render_summary(summary)


def test_demo_exits_non_zero_when_read_back_is_not_verified(
    tmp_path: Path, fast_env: None, without_dagster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_verify = readback_verify_module.verify_coverage

    def failing_verification(*args: Any, **kwargs: Any) -> Any:
        # The real read-back runs; its verdict is then turned into a failure, as for missing rows.
        return dataclasses.replace(real_verify(*args, **kwargs), verified=False)

    monkeypatch.setattr(readback_verify_module, "verify_coverage", failing_verification)
    result = CliRunner().invoke(
        app, ["demo", "--json", "--rows", "300", "--warehouse", str(tmp_path / "warehouse")]
    )
    assert result.exit_code == 1, (result.output, result.exception)
    summary = _one_json_object(result.stdout)
    assert summary["verified"] is False
