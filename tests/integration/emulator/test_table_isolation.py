"""One table the emulator cannot commit or mirror is refused and isolated; the others keep serving.

Everything goes through the official SDK against the emulator, real Delta (deltalake), real pyiceberg:
(a) out-of-range DATE/TIMESTAMP values are refused before the WAL ack; (b) a write-ahead log holding
a batch Delta refuses (left by an older emulator, or stranded by a NOT NULL column added out-of-band)
no longer stops the emulator from starting: that table is failed with its cause, the quarantine
command unblocks it keeping the bytes; (c) a timestamp beyond year 9999 already in Delta fails the
Iceberg mirror of that table only.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from tests.support.emulator_helpers import (
    SCHEMA,
    TABLE,
    create_table,
    events,
    open_arrow,
    open_json,
    read_table,
)
from zerobus_orchestration.cli.main import app
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.errors import EmulatorError
from zerobus_orchestration.emulator.records import batch_to_ipc
from zerobus_orchestration.emulator.repair import emulator_status, quarantine_table
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.emulator.wal import TableWal, wal_dir_name
from zerobus_orchestration.errors import SchemaRejectedError
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.classify import to_transport_error

DATED = "main.default.dated"
DATED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
SLOW_TABLE = EmulatorConfig(time_to_table_s=3600)  # only explicit materialisation


def dated(ids: list[int], days: list[int], micros: list[int] | None = None) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "d": pa.array(days, pa.date32()),
            "ts": pa.array(micros if micros is not None else [0] * len(ids), pa.timestamp("us", tz="UTC")),
        },
        schema=DATED_SCHEMA,
    )


def wal_root(warehouse: Path) -> Path:
    return warehouse / "_zerobus" / "wal"


def http_status(emu: Emulator) -> dict[str, object]:
    """``GET /_emulator/status`` with a token of this emulator (the route needs a credential)."""
    request = urllib.request.Request(
        emu.workspace_url + "/_emulator/status", headers={"Authorization": f"Bearer {emu.issue_token()}"}
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as response:
        body: dict[str, object] = json.loads(response.read())
    return body


def pending_wal_records(warehouse: Path, table: str) -> int:
    directory = wal_root(warehouse) / wal_dir_name(table)
    return sum(p.stat().st_size for p in directory.glob("*.wal")) if directory.is_dir() else 0


# -- (a) refused before the ack -----------------------------------------------------------------------
def test_out_of_range_dates_are_refused_through_the_sdk_not_acknowledged(
    warehouse: Path, emulator: Emulator
) -> None:
    create_table(warehouse, DATED, DATED_SCHEMA)
    stream = open_arrow(emulator, DATED, DATED_SCHEMA)
    with pytest.raises(Exception) as caught:
        stream.wait_for_offset(stream.ingest_batch(dated([1, 2, 3], [-(2**31), 2**31 - 1, 0])))
        stream.flush()
    text = str(caught.value)
    assert "SCHEMA_VALIDATION_FAILED" in text and f"{DATED}.d" in text and "0001-01-01..9999-12-31" in text
    # The package's client treats it as the schema rejection it is (stop and surface, never retry).
    assert isinstance(to_transport_error(caught.value, DATED), SchemaRejectedError)
    assert pending_wal_records(warehouse, DATED) == 0  # nothing durable, nothing acknowledged
    assert emulator.materialize_now(DATED) is None
    assert read_table(warehouse, DATED).num_rows == 0
    assert emulator.failed_tables() == {}


def test_out_of_range_timestamps_are_refused_on_the_row_path(warehouse: Path, emulator: Emulator) -> None:
    create_table(warehouse, DATED, DATED_SCHEMA)
    stream = open_json(emulator, DATED)
    year_294247 = 2**63 - 1  # microseconds
    with pytest.raises(Exception) as caught:
        stream.ingest_record_offset(json.dumps({"id": 1, "ts": year_294247}))
        stream.flush()
    assert "SCHEMA_VALIDATION_FAILED" in str(caught.value) and f"{DATED}.ts" in str(caught.value)
    assert pending_wal_records(warehouse, DATED) == 0
    # The edges of the range are accepted.
    edges = open_arrow(emulator, DATED, DATED_SCHEMA)
    edges.wait_for_offset(
        edges.ingest_batch(
            dated([1, 2], [-719_162, 2_932_896], [-62_135_596_800_000_000, 253_402_300_799_999_999])
        )
    )
    edges.close()
    emulator.materialize_now(DATED)
    assert read_table(warehouse, DATED).num_rows == 2


# -- (b) a table whose WAL Delta refuses is isolated, then quarantined ---------------------------------
def _leave_uncommittable_wal(warehouse: Path) -> bytes:
    """What an older emulator acknowledged: a good batch, out-of-range dates, a good batch (positions
    1, 2, 3), durable in DATED's write-ahead log. Returns the bad batch's bytes."""
    create_table(warehouse, DATED, DATED_SCHEMA)
    payload = batch_to_ipc(dated([1, 2, 3], [-(2**31), 2**31 - 1, 0]))
    wal = TableWal(wal_root(warehouse) / wal_dir_name(DATED), committed=0)
    for record in (batch_to_ipc(dated([10], [0])), payload, batch_to_ipc(dated([11], [0]))):
        wal.append_durable(record)
    wal.close()
    return payload


def test_an_uncommittable_wal_fails_its_table_only_and_quarantine_unblocks_it(warehouse: Path) -> None:
    payload = _leave_uncommittable_wal(warehouse)
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:  # used to raise in _replay
        failed = emu.failed_tables()
        assert list(failed) == [DATED]
        assert failed[DATED]["wal"]["seq"] == 2 and f"{DATED}.d" in failed[DATED]["wal"]["cause"]
        assert read_table(warehouse, DATED).column("id").to_pylist() == [10]  # what precedes it is in
        assert http_status(emu) == {"failed_tables": json.loads(json.dumps(failed))}
        # Every other table serves end to end through the official SDK.
        stream = open_arrow(emu, TABLE, SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(events([1, 2])))
        stream.close()
        emu.materialize_now(TABLE)
        assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]
        # The failed table refuses streams, naming the cause and the repair command.
        with pytest.raises(Exception, match=r"emulator quarantine --table main\.default\.dated"):
            refused = open_arrow(emu, DATED, DATED_SCHEMA)
            refused.wait_for_offset(refused.ingest_batch(dated([9], [0])))
        assert emu.materialize_all() == {TABLE: None}  # the failed table does not stop the others
    status = emulator_status(str(warehouse), wal_root(warehouse))
    assert status["failed"] == [DATED] and not status["emulator_running"]

    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False), pytest.raises(EmulatorError, match="stop it"):
        quarantine_table(str(warehouse), wal_root(warehouse), DATED)  # never next to a serving emulator
    report = quarantine_table(str(warehouse), wal_root(warehouse), DATED)

    assert [q["seq"] for q in report["quarantined"]] == [2]
    kept = Path(report["quarantine_dir"]) / report["quarantined"][0]["file"]
    assert kept.read_bytes() == payload  # the acknowledged bytes are kept, readable with pyarrow
    assert pa.ipc.open_stream(kept.read_bytes()).read_all().column("id").to_pylist() == [1, 2, 3]
    assert emulator_status(str(warehouse), wal_root(warehouse))["failed"] == []
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        assert emu.failed_tables() == {}
        stream = open_arrow(emu, DATED, DATED_SCHEMA)
        stream.wait_for_offset(stream.ingest_batch(dated([4], [0])))
        stream.close()
        emu.materialize_now(DATED)
    assert sorted(read_table(warehouse, DATED).column("id").to_pylist()) == [4, 10, 11]


def test_a_batch_only_delta_refuses_is_pinned_to_its_wal_position(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something the cheap checks miss (simulated by switching them off) is found by committing the
    records one by one: the ones before it are committed, the table fails at its exact position."""
    from zerobus_orchestration.emulator import materializer
    from zerobus_orchestration.emulator.errors import TableFailedError

    _leave_uncommittable_wal(warehouse)
    monkeypatch.setattr(materializer, "check_values", lambda table, batch: None)
    uri = table_uri(str(warehouse), DATED)
    state = materializer.TableState.open(DATED, uri, wal_root(warehouse) / wal_dir_name(DATED), None)
    try:
        with pytest.raises(TableFailedError, match="overflowed") as failed:
            state.materialize()
        assert failed.value.failure.seq == 2 and state.committed == 1 and state.pending() == 2
        assert read_table(warehouse, DATED).column("id").to_pylist() == [10]
    finally:
        state.wal.close()


def test_excising_a_record_from_a_sealed_segment_survives_a_reopen(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "wal", committed=0, segment_bytes=16)
    wal.append_durable(b"one")
    wal.append_durable(b"two")
    wal.release_through(0)  # the active segment is over its size: sealed, a new one starts
    wal.append_durable(b"three")
    assert len(list((tmp_path / "wal").glob("*.wal"))) == 2
    assert wal.excise(2).payload == b"two"
    assert [e.payload for e in wal.read_after(0, 1 << 20)] == [b"one", b"three"]
    wal.close()
    again = TableWal(tmp_path / "wal", committed=0, segment_bytes=16)
    assert [e.seq for e in again.read_after(0, 1 << 20)] == [1, 3]
    assert again.append_durable(b"four") == 4
    again.close()


def test_a_not_null_column_added_out_of_band_fails_only_that_table(warehouse: Path) -> None:
    from deltalake.schema import Field, PrimitiveType

    emu = Emulator(str(warehouse), SLOW_TABLE, iceberg=False).start()
    stream = open_arrow(emu, TABLE, SCHEMA)
    stream.wait_for_offset(stream.ingest_batch(events([1])))  # acknowledged, still in the WAL
    stream.close()
    assert emu._materializer is not None
    emu._materializer.stop()
    emu._materializer = None  # "crash": no final materialisation
    emu.stop()
    DeltaTable(table_uri(str(warehouse), TABLE)).alter.add_columns(
        [Field("required", PrimitiveType("string"), nullable=False)]
    )
    other = "main.default.other"
    create_table(warehouse, other)
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu2:
        assert "MISSING_REQUIRED_COLUMN" in emu2.failed_tables()[TABLE]["wal"]["cause"]
        ok = open_arrow(emu2, other, SCHEMA)
        ok.wait_for_offset(ok.ingest_batch(events([7])))
        ok.close()
        emu2.materialize_now(other)
    assert read_table(warehouse, other).column("id").to_pylist() == [7]
    report = quarantine_table(str(warehouse), wal_root(warehouse), TABLE)
    assert [q["rows"] for q in report["quarantined"]] == [1]
    assert pending_wal_records(warehouse, TABLE) == 0


def test_cli_status_and_quarantine(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEROBUS_WAREHOUSE", raising=False)
    _leave_uncommittable_wal(warehouse)
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False):
        pass  # the replay records the failure for `emulator status`
    runner = CliRunner()
    status = runner.invoke(app, ["emulator", "status", "--warehouse", str(warehouse), "--json"])
    assert status.exit_code == 1, status.output
    assert json.loads(status.stdout)["failed"] == [DATED]
    quarantine = ["emulator", "quarantine", "--table", DATED, "--warehouse", str(warehouse)]
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False):
        refused = runner.invoke(app, quarantine)
    assert refused.exit_code == 1 and "stop it first" in refused.stderr
    assert refused.stderr.count("\n") == 1  # one line naming the cause, no traceback
    fixed = runner.invoke(app, quarantine)
    assert fixed.exit_code == 0, fixed.output
    assert "quarantined 1 batch" in fixed.stdout
    again = runner.invoke(app, ["emulator", "status", "--warehouse", str(warehouse)])
    assert again.exit_code == 0, again.output


# -- (c) the Iceberg mirror ----------------------------------------------------------------------------
def test_a_timestamp_beyond_9999_in_delta_fails_only_that_tables_iceberg_mirror(warehouse: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz="UTC"))])
    for name, micros in (("main.default.far", 2**63 - 1), ("main.default.near", 0)):
        uri = create_table(warehouse, name, schema)
        data = pa.table({"id": [1], "ts": pa.array([micros], pa.timestamp("us", tz="UTC"))}, schema=schema)
        write_deltalake(uri, data, mode="append")  # landed in Delta before the emulator refused such values
    config = EmulatorConfig(time_to_table_s=3600, iceberg_lag_s=0.0)
    with Emulator(str(warehouse), config, iceberg=True) as emu:
        assert emu.mirror is not None
        emu.mirror.watch("main.default.far")
        emu.mirror.watch("main.default.near")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            emu.mirror.converted_version("main.default.near") >= 1
            and "main.default.far" in emu.failed_tables()
        ):
            time.sleep(0.05)
        assert emu.mirror.converted_version("main.default.near") == 1
        failure = emu.failed_tables()["main.default.far"]["iceberg"]
        assert failure["delta_version"] == 1 and "OverflowError" in failure["cause"]
        errors = emu.mirror.error_count("main.default.far")
        # A later commit to another table is still mirrored, and the failed one is not retried meanwhile.
        write_deltalake(
            table_uri(str(warehouse), "main.default.near"),
            pa.table({"id": [2], "ts": pa.array([0], pa.timestamp("us", tz="UTC"))}, schema=schema),
            mode="append",
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and emu.mirror.converted_version("main.default.near") < 2:
            time.sleep(0.05)
        assert emu.mirror.converted_version("main.default.near") == 2
        assert emu.mirror.error_count("main.default.far") == errors == 1


def test_a_corrupt_sealed_segment_fails_its_table_only_and_is_quarantined_whole(warehouse: Path) -> None:
    create_table(warehouse, DATED, DATED_SCHEMA)
    directory = wal_root(warehouse) / wal_dir_name(DATED)
    wal = TableWal(directory, committed=0, segment_bytes=16)
    wal.append_durable(batch_to_ipc(dated([1], [0])))
    wal.release_through(0)  # seals the first segment
    wal.append_durable(batch_to_ipc(dated([2], [0])))
    wal.close()
    sealed = sorted(directory.glob("*.wal"))[0]
    original = sealed.read_bytes()
    sealed.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))  # a bit flip: checksum fails
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        failure = emu.failed_tables()[DATED]["wal"]
        assert failure["phase"] == "open" and "WalCorruptError" in failure["cause"]
        stream = open_arrow(emu, TABLE, SCHEMA)  # the other table serves
        stream.wait_for_offset(stream.ingest_batch(events([5])))
        stream.close()
    report = quarantine_table(str(warehouse), wal_root(warehouse), DATED)
    assert len(report["quarantined"]) == 2  # both segments, bytes kept as they were
    assert (Path(report["quarantine_dir"]) / sealed.name).read_bytes()[:-1] == original[:-1]
    with Emulator(str(warehouse), SLOW_TABLE, iceberg=False) as emu:
        assert emu.failed_tables() == {}
