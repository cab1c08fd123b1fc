"""The layering contracts of ``.importlinter`` hold, and they catch the emulator importing upward again.

Layers: adapters > runtime > {embedded, registry} > {sink, catalog, read-back, coverage} > transport >
value modules; the emulator is a leaf reached only through ``embedded``. ``make lint`` runs the same
check; these tests keep it from rotting into a contract that can no longer fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("zerobus_orchestration", "dagster_defs", "airflow_provider")
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _lint_imports(root: Path) -> tuple[int, str]:
    """(exit code, report with whitespace collapsed: lint-imports wraps long lines)."""
    # PYTHONPATH first, so the packages under ``root`` win over the editable install's path entry.
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run(
        [LINT_IMPORTS, "--no-logo", "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(REPO / package, dest / package, ignore=ignore)
    shutil.copy(REPO / ".importlinter", dest / ".importlinter")


def test_the_import_contracts_hold() -> None:
    code, report = _lint_imports(REPO)
    assert code == 0, report
    assert "0 broken" in report


def test_the_contracts_break_if_the_daemon_imports_the_runtime_again(tmp_path: Path) -> None:
    """The cycle the split removed (daemon -> runtime -> launcher -> daemon) must not come back."""
    _copy_tree(tmp_path)
    daemon = tmp_path / "zerobus_orchestration" / "emulator" / "daemon.py"
    daemon.write_text(
        daemon.read_text() + "\n\ndef _regress() -> None:\n"
        "    from zerobus_orchestration.runtime import ZerobusRuntime  # noqa: F401\n"
    )
    code, report = _lint_imports(tmp_path)
    assert code != 0, report
    assert "The emulator is a leaf" in report
    # The fault acted: the report names the very import added above (from the copy, not the repo).
    assert "zerobus_orchestration.emulator.daemon -> zerobus_orchestration.runtime" in report


def test_the_contracts_break_if_a_service_imports_the_emulator(tmp_path: Path) -> None:
    """Only the embedded-mode module may reach the emulator; the read-back, say, may not."""
    _copy_tree(tmp_path)
    readback = tmp_path / "zerobus_orchestration" / "readback" / "__init__.py"
    readback.write_text(
        readback.read_text() + "\nimport zerobus_orchestration.emulator.server  # noqa: E402\n"
    )
    code, report = _lint_imports(tmp_path)
    assert code != 0, report
    assert "only through the embedded-mode module" in report
    assert "zerobus_orchestration.readback -> zerobus_orchestration.emulator.server" in report
