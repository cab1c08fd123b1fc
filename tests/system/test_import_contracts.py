"""The layering contracts of ``.importlinter`` hold, and they break on an import back up a layer.

Layers (docs/architecture.md#layers): cli | testing > runtime > resume | sink > coverage > catalog |
readback | transport > value modules, each a folder; the emulator is a leaf beside them, reached only
through ``runtime/embedded.py``. The layers contract is exhaustive: a module of the core that no layer
names fails lint. ``make lint`` runs the same check; these tests keep it from rotting into a contract
that can no longer fail.
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
        "    from zerobus_orchestration.runtime.facade import ZerobusRuntime  # noqa: F401\n"
    )
    code, report = _lint_imports(tmp_path)
    assert code != 0, report
    assert "The emulator is a leaf" in report
    # The fault acted: the report names the very import added above (from the copy, not the repo).
    assert "zerobus_orchestration.emulator.daemon -> zerobus_orchestration.runtime.facade" in report


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


def test_the_contracts_break_on_an_import_back_up_a_layer(tmp_path: Path) -> None:
    """Coverage sits below the runtime: a coverage module reaching up into it breaks the layers."""
    _copy_tree(tmp_path)
    store = tmp_path / "zerobus_orchestration" / "coverage" / "store.py"
    store.write_text(
        store.read_text() + "\n\ndef _regress() -> None:\n"
        "    from zerobus_orchestration.runtime.results import WriteResult  # noqa: F401\n"
    )
    code, report = _lint_imports(tmp_path)
    assert code != 0, report
    assert "Layers of the core" in report
    assert "zerobus_orchestration.coverage.store -> zerobus_orchestration.runtime.results" in report


def test_a_module_no_layer_names_breaks_the_contracts(tmp_path: Path) -> None:
    """Every module of the core has a layer: a new loose top-level module must be placed first."""
    _copy_tree(tmp_path)
    (tmp_path / "zerobus_orchestration" / "loose_service.py").write_text('"""Placed in no layer."""\n')
    code, report = _lint_imports(tmp_path)
    assert code != 0, report
    assert "zerobus_orchestration.loose_service" in report
