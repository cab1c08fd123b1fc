"""docs/errors.md has a section for every error class the packages define, so a new error cannot land
undocumented. The classes are found in the source (every subclass of ``ZerobusOrchestrationError``,
however indirect), not from a list kept by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("zerobus_orchestration", "dagster_defs", "airflow_provider")
PAGE = REPO / "docs" / "errors.md"
ROOT = "ZerobusOrchestrationError"


def _bases() -> dict[str, set[str]]:
    """Every class defined in the packages, by name, with the names of its bases."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                    found.setdefault(node.name, set()).update(names)
    return found


def error_classes() -> set[str]:
    bases = _bases()
    errors = {ROOT}
    while True:
        more = {name for name, parents in bases.items() if parents & errors} - errors
        if not more:
            return {name for name in errors if not name.startswith("_")}
        errors |= more


def test_every_error_class_has_a_section() -> None:
    documented = set(re.findall(r"^### `(\w+)`", PAGE.read_text(), re.MULTILINE))
    missing = sorted(error_classes() - documented)
    assert missing == [], (
        f"add a '### `Name`' section (what it means, what to do) to docs/errors.md for: {missing}"
    )


def test_the_search_finds_indirect_subclasses() -> None:
    found = error_classes()
    # PoisonedBatchError derives from DeliveryFailedError, TableTruthError from CatalogError.
    assert {"ConfigError", "PoisonedBatchError", "TableTruthError", "WalCorruptError"} <= found
    assert "ErrorClass" not in found and "OneLineErrorsTyper" not in found


def test_no_section_names_a_class_that_does_not_exist() -> None:
    documented = set(re.findall(r"^### `(\w+)`", PAGE.read_text(), re.MULTILINE))
    assert sorted(documented - error_classes()) == []
