"""WAL -> Delta exactly once: app-transaction positions, replay on restart, crash windows."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.support.emulator_helpers import SCHEMA, TABLE, create_table, events, open_arrow, read_table
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.errors import EmulatorError
from zerobus_orchestration.emulator.materializer import WAL_APP_ID, TableState
from zerobus_orchestration.emulator.records import batch_to_ipc
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.emulator.wal import wal_dir_name
from zerobus_orchestration.tables import table_uri

SLOW_TABLE = EmulatorConfig(time_to_table_s=3600)  # only explicit materialisation in these tests


def rows(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64())})


def wal_dir(warehouse: Path) -> Path:
    return warehouse / "_zerobus" / "wal" / wal_dir_name(TABLE)


def test_commit_records_the_wal_position_in_the_same_delta_commit(warehouse: Path) -> None:
    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    for ids in ([1, 2], [3]):
        state.wal.append_durable(batch_to_ipc(rows(ids)))
    version = state.materialize()
    dt = DeltaTable(table_uri(str(warehouse), TABLE))
    assert version == dt.version() == 1
    assert dt.transaction_version(WAL_APP_ID) == 2
    assert state.materialize() is None  # idle: no empty commits
    assert DeltaTable(table_uri(str(warehouse), TABLE)).version() == 1
    state.wal.close()


def test_an_idle_table_is_not_read_until_a_record_arrives(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The materialiser runs every ``time_to_table_s``: with nothing past the watermark it leaves the Delta
    log unread (it read it each period, about 4% of a core for one idle table at 0.2 s)."""
    from zerobus_orchestration.emulator import materializer

    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    loads: list[str] = []
    real_load = materializer.load_table

    def counted_load(uri: str, options: dict[str, str] | None) -> DeltaTable:
        loads.append(uri)
        return real_load(uri, options)

    monkeypatch.setattr(materializer, "load_table", counted_load)
    assert [state.materialize() for _ in range(5)] == [None] * 5
    assert loads == []  # nothing durable: the table was never opened
    state.wal.append_durable(batch_to_ipc(rows([1, 2])))
    assert state.materialize() == 1 and loads  # a record: read, committed
    reads = len(loads)
    assert state.materialize() is None and len(loads) == reads  # idle again: unread again
    state.wal.close()
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]


def test_committed_files_carry_the_delta_statistics_readers_skip_files_by(warehouse: Path) -> None:
    """Parquet statistics are written per column chunk (not per page): the file stats still come out."""
    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    state.wal.append_durable(batch_to_ipc(rows([5, 2, 9])))
    state.materialize()
    state.wal.close()
    adds = pa.table(DeltaTable(table_uri(str(warehouse), TABLE)).get_add_actions(flatten=True)).to_pydict()
    assert (adds["min.id"], adds["max.id"], adds["null_count.id"]) == ([2], [9], [0])


def test_crash_after_delta_commit_before_wal_release_does_not_duplicate(warehouse: Path) -> None:
    uri = table_uri(str(warehouse), TABLE)
    state = TableState.open(TABLE, uri, wal_dir(warehouse), None)
    state.wal.append_durable(batch_to_ipc(rows([1, 2, 3])))
    state.wal.release_through = lambda position: None  # type: ignore[method-assign]  # "crash" before release
    state.materialize()
    state.wal.close()
    reopened = TableState.open(TABLE, uri, wal_dir(warehouse), None)
    assert reopened.committed == 1
    assert reopened.materialize() is None
    reopened.wal.append_durable(batch_to_ipc(rows([4])))
    reopened.materialize()
    reopened.wal.close()
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2, 3, 4]


def test_restart_replays_acknowledged_rows_exactly_once(warehouse: Path) -> None:
    emu = Emulator(str(warehouse), SLOW_TABLE, iceberg=False).start()
    stream = open_arrow(emu, TABLE, SCHEMA)
    stream.wait_for_offset(stream.ingest_batch(events([1, 2])))
    stream.close()
    # Simulate a crash: stop serving without the final materialisation, leaving the WAL behind.
    assert emu._grpc is not None and emu._materializer is not None
    emu._grpc.stop(0).wait()
    emu._materializer.stop()
    emu._materializer = None
    emu.stop()
    assert read_table(warehouse).num_rows == 0
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as again:
        assert again.replayed == {TABLE: 1}
        assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as third:
        assert third.replayed == {TABLE: 0}
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]


def test_restart_replays_a_wal_an_earlier_version_wrote(warehouse: Path) -> None:
    """Records in the earlier ``ZBW1`` format (CRC-32), spelled out byte by byte, reach Delta once."""
    directory = wal_dir(warehouse)
    directory.mkdir(parents=True)
    records = b""
    for seq, ids in ((1, [1, 2]), (2, [3])):
        payload = batch_to_ipc(rows(ids))
        records += struct.pack("<4sQII", b"ZBW1", seq, len(payload), zlib.crc32(payload)) + payload
    (directory / f"{1:020d}.wal").write_bytes(records)
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        assert emu.replayed == {TABLE: 2}
        stream = open_arrow(emu, TABLE, SCHEMA)  # and the log goes on, in the current format
        stream.wait_for_offset(stream.ingest_batch(events([4])))
        stream.close()
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2, 3, 4]
    assert DeltaTable(table_uri(str(warehouse), TABLE)).transaction_version(WAL_APP_ID) == 3


def test_columns_added_by_the_catalog_after_ack_are_filled_with_nulls(warehouse: Path) -> None:
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([9])))
        stream.close()
        from deltalake.schema import Field, PrimitiveType

        DeltaTable(table_uri(str(warehouse), TABLE)).alter.add_columns(
            [Field("added", PrimitiveType("string"))]
        )
        emu.materialize_now(TABLE)
    assert read_table(warehouse).to_pylist() == [{"id": 9, "name": "n9", "score": 4.5, "added": None}]


def test_materialize_now_on_missing_table_names_it(warehouse: Path) -> None:
    with (
        Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu,
        pytest.raises(EmulatorError, match=r"main\.x\.y does not exist"),
    ):
        emu.materialize_now("main.x.y")


def test_wal_for_a_dropped_table_is_kept_not_replayed(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    create_table(warehouse)
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([1])))
        stream.close()
        assert emu._materializer is not None
        emu._materializer.stop()
    other = tmp_path / "copy"
    (other / "_zerobus").mkdir(parents=True)
    (warehouse / "_zerobus" / "wal").rename(other / "_zerobus" / "wal")
    with Emulator(str(other), SLOW_TABLE, iceberg=False) as emu2:
        assert emu2.replayed == {}
    assert wal_dir(other).is_dir()


def test_table_state_repr_does_not_show_the_object_store_secret(warehouse: Path) -> None:
    options = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-very-secret"}
    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    state.storage_options = options
    try:
        assert "very-secret" not in repr(state)
    finally:
        state.wal.close()


def test_materializer_marks_a_table_delta_refuses_failed_instead_of_retrying_it(warehouse: Path) -> None:
    from zerobus_orchestration.emulator.materializer import Materializer

    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    try:
        state.wal.append_durable(b"not an Arrow IPC stream")  # no retry can ever commit it
        materializer = Materializer(3600, lambda: [state], None)
        for _ in range(20):
            materializer.run_once(final=True)
        assert len(materializer.errors) == 1  # failed once, then skipped: no endless retry loop
        assert TABLE in materializer.errors[0] and "emulator quarantine --table" in materializer.errors[0]
        assert state.failure is not None and state.failure.seq == 1 and state.failure.data_error
        assert state.pending() == 1  # nothing was dropped
    finally:
        state.wal.close()


def test_materializer_gives_up_on_a_table_whose_storage_keeps_failing(warehouse: Path) -> None:
    from zerobus_orchestration.emulator.materializer import MAX_TRANSIENT_FAILURES, Materializer

    state = TableState.open(TABLE, table_uri(str(warehouse), TABLE), wal_dir(warehouse), None)
    try:
        state.wal.append_durable(batch_to_ipc(rows([1])))
        state.uri = str(warehouse / "gone")  # the Delta table cannot be loaded: not the batch's fault
        materializer = Materializer(0.001, lambda: [state], None)
        for _ in range(MAX_TRANSIENT_FAILURES + 5):
            materializer.run_once(final=True)
        assert len(materializer.errors) == MAX_TRANSIENT_FAILURES  # retried, then marked failed
        assert state.failure is not None and not state.failure.data_error
        assert "restart the emulator" in state.failure.message()
        assert state.pending() == 1
    finally:
        state.wal.close()
