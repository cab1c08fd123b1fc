from __future__ import annotations

from conftest_uc import fake_uc, isolated_databricks_env, unity

__all__ = ["fake_uc", "isolated_databricks_env", "unity"]
