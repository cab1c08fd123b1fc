"""The declared public API: what ``import zerobus_orchestration`` (and ``dagster_defs``) offer, kept in
``docs/public-api.txt`` so that any change to the surface is a visible diff in review.

After an intended change, regenerate the record and commit it with the change::

    .venv/bin/python tests/unit/test_public_api.py --write
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

RECORD = Path(__file__).resolve().parents[2] / "docs" / "public-api.txt"
# (package, whether class members are part of the record). dagster_defs classes are Dagster configurable
# objects whose inherited members belong to Dagster; their names and bases are recorded, not their members.
PACKAGES = (("zerobus_orchestration", True), ("zerobus_orchestration.sink", True), ("dagster_defs", False))
# Module paths are dropped from rendered types (``dagster._core.definitions.asset_key.AssetKey`` reads as
# ``AssetKey``) so the record changes with our surface, not with a dependency's internal layout.
_MODULE_PATH = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
HEAVY = {"pyarrow", "numpy", "zerobus", "deltalake", "pyiceberg", "grpc", "dagster", "airflow", "pydantic"}


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _public_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # dagster_defs re-exports with ``import X as X``, Dagster's own convention
        names = [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)]
    return sorted(names)


def _class_lines(cls: type, members: bool) -> list[str]:
    bases = ", ".join(b.__qualname__ for b in cls.__bases__)
    lines = [f"class {cls.__qualname__}({bases})"]
    if not members:
        return lines
    if issubclass(cls, enum.Enum):
        return lines + [f"    {m.name} = {m.value!r}" for m in cls]
    fields = getattr(cls, "model_fields", None)  # pydantic: the fields are the constructor
    if isinstance(fields, dict):
        lines += [
            f"    {name}: {inspect.formatannotation(field.annotation)}"
            for name, field in sorted(fields.items())
        ]
    elif dataclasses.is_dataclass(cls) or "__init__" in vars(cls):
        lines.append(f"    __init__{_signature(cls)}")
    for attr, value in sorted(vars(cls).items()):
        if attr.startswith("_") or (isinstance(fields, dict) and attr in fields):
            continue
        if isinstance(value, property):
            lines.append(f"    {attr}: property")
        elif isinstance(value, staticmethod | classmethod):
            lines.append(f"    {attr}{_signature(value.__func__)}  [{type(value).__name__}]")
        elif inspect.isfunction(value):
            lines.append(f"    {attr}{_signature(value)}")
    return lines


def render() -> str:
    """The public surface as text: one block per package, one entry per exported name."""
    out: list[str] = []
    for package, members in PACKAGES:
        module = importlib.import_module(package)
        out.append(f"## {package}")
        for name in _public_names(module):
            value = getattr(module, name)
            if inspect.isclass(value):
                out += _class_lines(value, members)
            elif callable(value):
                out.append(f"def {name}{_signature(value)}")
            else:
                out.append(f"{name}: {type(value).__name__}")
        out.append("")
    return "\n".join(
        line if line.startswith("## ") else _ADDRESS.sub("", _MODULE_PATH.sub("", line)) for line in out
    )


def test_public_api_matches_the_committed_record() -> None:
    assert RECORD.read_text() == render(), (
        "the public API changed: if intended, run `.venv/bin/python tests/unit/test_public_api.py --write` "
        "and commit docs/public-api.txt with the change"
    )


def test_every_exported_name_resolves_and_is_listed_by_dir() -> None:
    import zerobus_orchestration

    assert set(zerobus_orchestration._EXPORTS) == set(zerobus_orchestration.__all__) - {"__version__"}
    for name in zerobus_orchestration.__all__:
        assert getattr(zerobus_orchestration, name) is not None, name
    assert set(zerobus_orchestration.__all__) <= set(dir(zerobus_orchestration))


def test_an_unknown_name_raises_attribute_error_naming_it() -> None:
    import zerobus_orchestration

    try:
        zerobus_orchestration.AckLane  # noqa: B018 - an internal: not exported
    except AttributeError as exc:
        assert "AckLane" in str(exc)
    else:
        raise AssertionError("AckLane must not be reachable from the package root")


def test_importing_the_package_loads_nothing_heavy() -> None:
    """Every Airflow process imports the core: the exports resolve lazily, on first attribute access."""
    code = "import sys, json, zerobus_orchestration\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    heavy = HEAVY & {name.split(".")[0] for name in modules}
    assert not heavy, f"import zerobus_orchestration loaded {sorted(heavy)}"
    # _version holds one string and imports nothing: the face reads ``__version__`` from it.
    submodules = sorted(
        m for m in modules if m.startswith("zerobus_orchestration.") and m != "zerobus_orchestration._version"
    )
    assert not submodules, f"import zerobus_orchestration imported {submodules}"


def test_the_exports_are_visible_to_type_checkers() -> None:
    """Each lazily exported name also has a TYPE_CHECKING import, so mypy and IDEs see the same surface."""
    import ast

    import zerobus_orchestration

    tree = ast.parse(Path(zerobus_orchestration.__file__).read_text())
    typed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    typed |= {alias.asname or alias.name for alias in stmt.names}
    assert typed == set(zerobus_orchestration.__all__) - {"__version__"}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/unit/test_public_api.py --write")
    # Run as a script, this file's folder is sys.path[0], and tests/unit/zerobus_orchestration (the tests
    # of the package) would shadow the package itself: import from the repository root instead.
    sys.path[0] = str(RECORD.parents[1])
    RECORD.write_text(render())
    print(f"wrote {RECORD}")


def test_the_version_string_is_the_distributions() -> None:
    import tomllib

    from zerobus_orchestration._version import __version__

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert __version__ == project["version"]
