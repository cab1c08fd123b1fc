"""``zerobus-orch demo`` runs downward: the core finds the Dagster flavour through an entry point and never
imports an adapter itself (no import of ``dagster_defs`` or ``airflow_provider`` anywhere in the core)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import zerobus_orchestration
from zerobus_orchestration.cli import demo

CORE = Path(zerobus_orchestration.__file__).parent
ADAPTERS = ("dagster_defs", "airflow_provider")


def _imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):  # function-level imports included: a lazy import is still a dependency
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            names += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return names


def test_the_core_never_imports_an_adapter() -> None:
    found = [
        f"{path.relative_to(CORE.parent)}: {name}"
        for path in sorted(CORE.rglob("*.py"))
        for name in _imported_modules(ast.parse(path.read_text()))
        if name.split(".")[0] in ADAPTERS
    ]
    assert not found, found


class _Entry:
    def __init__(self, name: str, load: Callable[[], Any]) -> None:
        self.name = name
        self.load = load


def _flavour(cfg: Any, rows: int, say: Any) -> dict[str, Any]:
    return {"rows": rows}


def _entries(*entries: _Entry) -> Callable[..., list[_Entry]]:
    def lookup(*, group: str, name: str) -> list[_Entry]:
        assert group == demo.DEMO_ENTRY_POINTS
        return [e for e in entries if e.name == name]

    return lookup


def test_the_demo_runs_the_flavour_registered_under_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "entry_points", _entries(_Entry("dagster", lambda: _flavour)))
    assert demo._dagster_demo(lambda _m: None) is _flavour


def test_a_flavour_that_cannot_import_selects_the_core_demo_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'dagster'", name="dagster")

    said: list[str] = []
    monkeypatch.setattr(demo, "entry_points", _entries(_Entry("dagster", missing)))
    assert demo._dagster_demo(said.append) is None
    assert said and "dagster" in said[0] and "core data path" in said[0]


def test_no_registered_flavour_selects_the_core_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(demo, "entry_points", _entries())
    assert demo._dagster_demo(said.append) is None
    assert said == ["no Dagster demo is installed; running the core data path"]


def test_the_distribution_registers_the_dagster_flavour() -> None:
    (entry,) = entry_points(group=demo.DEMO_ENTRY_POINTS, name="dagster")
    assert entry.value == "dagster_defs.demo:run_dagster_demo"
