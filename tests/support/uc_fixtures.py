"""Fixtures for the fake Unity Catalog (a plugin loaded by tests/conftest.py).

Every test using the fake gets an isolated databricks-sdk environment (``isolated_databricks_env`` from
the shipped pytest plugin): no ``DATABRICKS_*`` variable, a config file path that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.unity import StatementPolling, UnityCatalog, workspace_client
from zerobus_orchestration.testing import FakeUnityCatalog

__all__ = ["FAST_POLLING", "RETRY_TIMEOUT_S", "Backend", "fake_uc", "unity"]

FAST_POLLING = StatementPolling(wait_timeout="5s", poll_initial_s=0.01, poll_max_s=0.05, deadline_s=10.0)
RETRY_TIMEOUT_S = 5


@pytest.fixture
def fake_uc(isolated_databricks_env: None) -> Iterator[FakeUnityCatalog]:
    with FakeUnityCatalog() as uc:
        yield uc


@pytest.fixture
def unity(fake_uc: FakeUnityCatalog) -> UnityCatalog:
    """The unity backend on the fake, authenticated with OAuth M2M (the production path)."""
    client = workspace_client(
        fake_uc.url,
        client_id=fake_uc.client_id,
        client_secret=fake_uc.client_secret,
        retry_timeout_seconds=RETRY_TIMEOUT_S,
    )
    return UnityCatalog(client, fake_uc.warehouse_id, polling=FAST_POLLING)


@dataclass
class Backend:
    kind: str  # "local" or "unity"
    catalog: TableCatalog
    fake: FakeUnityCatalog | None = None
    local: LocalCatalog | None = None

    def human_comment(self, table: str, column: str, comment: str) -> None:
        """A person edits a column comment outside this package (UI, SQL, another tool)."""
        if self.fake is not None:
            self.fake.execute_sql(f"COMMENT ON COLUMN {table}.{column} IS '{comment}'")
            return
        from deltalake import DeltaTable

        assert self.local is not None
        DeltaTable(self.local.location(table)).alter.set_column_metadata(column, {"comment": comment})
