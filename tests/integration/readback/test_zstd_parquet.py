"""Tables with Iceberg reads on are written as Zstandard Parquet, as on Databricks, and read back so.

The emulator wrote Snappy for every table while its Iceberg mirror declared Zstandard, so no local run
ever read a Zstandard file through Iceberg. Now the primary-raw table the runtime creates (UniForm
properties on) gets Zstandard data files, read-back reads exactly those files through the Iceberg
REST facade with pyiceberg, and a plain Delta table keeps Snappy.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from zerobus.sdk.shared import TableProperties

from tests.support.emulator_helpers import create_table, read_table, row_options, sdk_for
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.zstd_events"


def codecs(uri: str) -> set[str]:
    """Every column chunk's compression over the table's current data files."""
    found: set[str] = set()
    for path in DeltaTable(uri).file_uris():
        meta = pq.read_metadata(path)
        for group in range(meta.num_row_groups):
            row_group = meta.row_group(group)
            found.update(row_group.column(c).compression for c in range(row_group.num_columns))
    return found


def test_a_table_with_iceberg_reads_is_zstd_and_reads_back_through_iceberg(tmp_path: Path) -> None:
    config = embedded_test_config(tmp_path / "wh")
    runtime = ZerobusRuntime(config)
    try:
        rows = pa.table(
            {
                "id": pa.array(range(200), pa.int64()),
                "device": pa.array([f"device-{i % 7}" for i in range(200)], pa.string()),
                "amount": pa.array([Decimal(i) / 100 for i in range(200)], pa.decimal128(12, 2)),
            }
        )
        runtime.write(TABLE, rows, source="meters")
        runtime.flush()
        uri = table_uri(config.warehouse, TABLE)
        configuration = DeltaTable(uri).metadata().configuration
        assert configuration["delta.universalFormat.enabledFormats"] == "iceberg"
        assert codecs(uri) == {"ZSTD"}

        report = runtime.verify(TABLE, source="meters")
        assert report.verified, report.to_json()
        back = runtime.read_rows(TABLE, source="meters").sort_by("id")
        assert back.column("id").to_pylist() == list(range(200))
        assert back.column("amount").to_pylist() == rows.column("amount").to_pylist()

        # The files Iceberg serves are the Zstandard ones (the mirror reads the Delta files in place).
        iceberg = runtime.emulator.mirror.load_iceberg_table(TABLE)
        served = {task.file.file_path.removeprefix("file://") for task in iceberg.scan().plan_files()}
        assert served and served == set(DeltaTable(uri).file_uris())
        assert iceberg.properties["write.parquet.compression-codec"] == "zstd"
    finally:
        runtime.close()


def test_a_plain_delta_table_stays_snappy(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    uri = create_table(warehouse)  # no UniForm properties
    with Emulator(str(warehouse), EmulatorConfig(time_to_table_s=3600, iceberg_lag_s=0.0)) as emu:
        stream = sdk_for(emu).create_stream(
            emu.client_id, emu.client_secret, TableProperties("main.default.events"), row_options()
        )
        stream.wait_for_offset(stream.ingest_records_offset([{"id": i, "name": "x"} for i in range(10)]))
        stream.close()
        emu.materialize_now("main.default.events")
        emu.mirror.sync_now("main.default.events")
        iceberg = emu.mirror.load_iceberg_table("main.default.events")
        assert iceberg.properties["write.parquet.compression-codec"] == "snappy"  # what the files are
    assert read_table(warehouse).num_rows == 10
    assert codecs(uri) == {"SNAPPY"}
