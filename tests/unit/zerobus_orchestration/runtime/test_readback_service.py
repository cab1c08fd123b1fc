"""``ReadbackService.delta_version`` reads the catalog once where nothing commits on request."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.runtime.readback_service import ReadbackService

TABLE = "main.derived.versions"


def test_without_an_emulator_the_version_is_the_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Production and ``serve``: no emulator commits on request, so a second read of the version (on Unity
    a REST call and a SQL statement) could only repeat the first; the whole table is never described."""
    catalog = LocalCatalog(tmp_path / "wh")
    outcome = catalog.reconcile(
        TABLE, DesiredTable.build(TABLE, pa.schema([("id", pa.int64())]), Role.DERIVED)
    )
    service = ReadbackService(ZerobusConfig(warehouse=str(tmp_path / "wh")), catalog=catalog)
    reads: list[str] = []
    latest_version = catalog.latest_version
    monkeypatch.setattr(catalog, "latest_version", lambda table: reads.append(table) or latest_version(table))
    monkeypatch.setattr(catalog, "describe", lambda table: pytest.fail(f"{table} described"))
    assert service.delta_version(TABLE) == outcome.state.version
    assert reads == [TABLE]
    assert service.delta_version("main.derived.absent") is None
