"""``ReadbackService`` verifies on its own: catalog, coverage and the Iceberg endpoint, no stream pool.

Rows are written through the runtime (official SDK -> embedded emulator); a standalone service built
from the config, holding only the emulator handle for its Iceberg endpoint, then verifies them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import NothingToVerifyError
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.readback_service import ReadbackService
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.readback_service"


def test_a_standalone_service_verifies_what_the_runtime_wrote(tmp_path: Path) -> None:
    config = embedded_test_config(tmp_path / "wh")
    runtime = ZerobusRuntime(config)
    try:
        rows = pa.table({"id": pa.array(range(50), pa.int64())})
        runtime.write(TABLE, rows, source="orders", partition="p1")
        runtime.flush()
        service = ReadbackService.from_config(config, emulator=runtime.emulator)
        try:
            assert service.coverage_map(TABLE, source="orders", partition="p1") == runtime.coverage_map(
                TABLE, source="orders", partition="p1"
            )
            report = service.verify(TABLE, source="orders", partition="p1")
            assert report.verified, report.to_json()
            assert service.read_rows(TABLE, source="orders", partition="p1").num_rows == 50
            with pytest.raises(NothingToVerifyError):
                service.verify(TABLE, source="nobody", raise_errors=True)
        finally:
            service.close()
    finally:
        runtime.close()
