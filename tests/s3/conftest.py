from __future__ import annotations

from conftest_moto import moto_lab, unique_table
from conftest_uc import isolated_databricks_env

__all__ = ["isolated_databricks_env", "moto_lab", "unique_table"]
