from __future__ import annotations

from conftest_uc import fake_uc, isolated_databricks_env, unity

from zerobus_orchestration.testing.pytest_plugin import fake_unity_catalog

__all__ = ["fake_uc", "fake_unity_catalog", "isolated_databricks_env", "unity"]
