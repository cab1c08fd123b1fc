"""One fixture, two backends: the same scenarios run on ``local`` (delta-rs + SQLite) and ``unity``
(the fake Unity Catalog through the real databricks-sdk), so the backends cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.uc_fixtures import FAST_POLLING, RETRY_TIMEOUT_S, Backend
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.unity import UnityCatalog, workspace_client
from zerobus_orchestration.testing import FakeUnityCatalog

__all__ = ["Backend", "backend"]


@pytest.fixture(params=["local", "unity"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, isolated_databricks_env: None
) -> Iterator[Backend]:
    if request.param == "local":
        local = LocalCatalog(tmp_path / "warehouse")
        yield Backend("local", local, local=local)
        return
    with FakeUnityCatalog() as fake:
        client = workspace_client(
            fake.url,
            client_id=fake.client_id,
            client_secret=fake.client_secret,
            retry_timeout_seconds=RETRY_TIMEOUT_S,
        )
        yield Backend("unity", UnityCatalog(client, fake.warehouse_id, polling=FAST_POLLING), fake=fake)
