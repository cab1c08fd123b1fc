"""The test tree keeps the rule in tests/README.md, so a newcomer finds a module's tests by its path."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
KINDS = ("unit", "integration", "system")
PACKAGES = ("zerobus_orchestration", "dagster_defs", "airflow_provider")


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_is_unit_integration_or_system() -> None:
    misplaced = [
        str(p.relative_to(TESTS)) for p in _test_files() if p.relative_to(TESTS).parts[0] not in KINDS
    ]
    assert misplaced == [], f"move these under tests/unit, tests/integration or tests/system: {misplaced}"


def test_unit_folders_mirror_the_source_packages() -> None:
    unmirrored = []
    for path in _test_files():
        parts = path.relative_to(TESTS / "unit").parts if path.is_relative_to(TESTS / "unit") else None
        if parts is None or len(parts) == 1:  # tests/unit/test_x.py: about the project as a whole
            continue
        package = REPO.joinpath(*parts[:-1])
        if parts[0] not in PACKAGES or not (package / "__init__.py").is_file():
            unmirrored.append(str(path.relative_to(TESTS)))
    assert unmirrored == [], f"tests/unit/<package>/<subpackage>/ must name a real package: {unmirrored}"


def test_every_test_folder_is_a_package() -> None:
    # Helpers are imported as ``tests.support.x``; a folder without __init__.py breaks that rule quietly.
    missing = [
        str(d.relative_to(REPO))
        for d in [TESTS, *sorted(p for p in TESTS.rglob("*") if p.is_dir())]
        if d.name != "__pycache__" and not (d / "__init__.py").is_file()
    ]
    assert missing == [], f"add an empty __init__.py to: {missing}"
