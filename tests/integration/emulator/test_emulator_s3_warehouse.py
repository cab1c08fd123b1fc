"""The emulator on an object-store warehouse (moto S3 server): WAL stays local, Delta goes to S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.support.emulator_helpers import SCHEMA, TABLE, events, open_arrow
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator, default_wal_dir
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.moto_s3 import MotoServer, S3Lab, bootstrap_lab

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lab() -> Iterator[S3Lab]:
    with MotoServer() as server:
        yield bootstrap_lab(server, bucket="lake")


def test_s3_warehouse_round_trip_and_replay(lab: S3Lab, tmp_path: Path) -> None:
    warehouse = "s3://lake/emulator-wh"
    options = lab.admin_options()
    uri = table_uri(warehouse, TABLE)
    DeltaTable.create(uri, schema=SCHEMA, storage_options=options)
    config = EmulatorConfig(time_to_table_s=3600)
    with Emulator(
        warehouse, config, storage_options=options, wal_dir=str(tmp_path / "wal"), iceberg=False
    ) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([1, 2])))
        stream.close()
        assert emu._materializer is not None
        emu._materializer.stop()  # "crash": leave the acknowledged batch in the local WAL only
        emu._materializer = None
    assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 0
    with Emulator(
        warehouse, config, storage_options=options, wal_dir=str(tmp_path / "wal"), iceberg=False
    ) as again:
        assert again.replayed == {TABLE: 1}
    assert sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == [
        1,
        2,
    ]


def test_object_store_warehouse_gets_a_local_wal_folder() -> None:
    a, b = default_wal_dir("s3://lake/a"), default_wal_dir("s3://lake/b")
    assert a != b and a.parent == b.parent and str(a).startswith(str(Path.home()))
    assert default_wal_dir("/data/wh") == Path("/data/wh/_zerobus/wal")
