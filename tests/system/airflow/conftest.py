"""The Airflow system tests' warehouse: the one the session's embedded ``zerobus_default`` connection uses.

The environment itself (AIRFLOW_HOME, connections) is set up by the ``tests.support.airflow_env`` plugin.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.airflow_env import WAREHOUSE


@pytest.fixture(scope="session")
def warehouse() -> Path:
    return WAREHOUSE
