"""pytest fixtures for testing pipelines against the fake Unity Catalog.

Enable in a root ``conftest.py`` with ``pytest_plugins = ["zerobus_orchestration.testing.pytest_plugin"]``:

- ``isolated_databricks_env``: no ``DATABRICKS_*`` variable and a missing ``DATABRICKS_CONFIG_FILE``, so a
  developer's profile cannot leak into a test;
- ``fake_unity_catalog``: a started ``FakeUnityCatalog`` (stopped after the test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerobus_orchestration.testing.uc_fake import FakeUnityCatalog


@pytest.fixture
def isolated_databricks_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in [v for v in os.environ if v.startswith("DATABRICKS_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-such-databrickscfg"))


@pytest.fixture
def fake_unity_catalog(isolated_databricks_env: None) -> Iterator[FakeUnityCatalog]:
    with FakeUnityCatalog() as fake:
        yield fake
