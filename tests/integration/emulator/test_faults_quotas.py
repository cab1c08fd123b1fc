"""Fault bookkeeping (counted, one-shot by default), fault files, throttle and stream limits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError
from zerobus import IPCCompression

from tests.support.emulator_helpers import SCHEMA, TABLE, events, open_arrow, read_table
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.faults import FaultInjector, FaultKind, FaultSpec, load_faults
from zerobus_orchestration.emulator.quotas import StreamLimiter, Throttle
from zerobus_orchestration.emulator.server import Emulator


def test_faults_are_spent_after_their_stream_count() -> None:
    injector = FaultInjector([FaultSpec(kind=FaultKind.ABORT, table="c.s.t", streams=2)])
    assert injector.arm("c.s.other", "arrow") == []
    assert len(injector.arm("C.S.T", "arrow")) == 1  # table names match case-insensitively
    assert len(injector.arm("c.s.t", "row")) == 1
    assert injector.arm("c.s.t", "arrow") == []  # spent: fresh connections are healthy again
    assert injector.pending() == []


def test_protocol_filter() -> None:
    injector = FaultInjector([FaultSpec(kind=FaultKind.ROTATE, protocol="row")])
    assert injector.arm("c.s.t", "arrow") == []
    assert [f.kind for f in injector.arm("c.s.t", "row")] == [FaultKind.ROTATE]


def test_a_fault_aimed_at_one_stream_skips_the_tables_earlier_connections() -> None:
    injector = FaultInjector([FaultSpec(kind=FaultKind.DELAY_ACKS, table="c.s.t", stream=1, delay_s=2.0)])
    assert injector.arm("c.s.other", "arrow") == []  # other tables have their own numbering
    assert injector.arm("c.s.t", "arrow") == []  # connection 0 of c.s.t
    assert injector.arm("c.s.other", "arrow") == []
    assert [f.stream for f in injector.arm("C.S.T", "arrow")] == [1]  # connection 1: this one
    assert injector.arm("c.s.t", "arrow") == [] and injector.pending() == []


def test_handing_a_fault_to_a_stream_is_not_recording_that_it_acted() -> None:
    injector = FaultInjector([FaultSpec(kind=FaultKind.WITHHOLD_ACKS, after_batches=5)])
    assert injector.enabled is False  # remote arming (HTTP) is off unless the emulator enables it
    (spec,) = injector.arm("c.s.t", "arrow")
    assert injector.fired == [spec] and injector.acted == [] and injector.actions == []
    injector.record_acted(spec, "c.s.t", "stream-1", "withheld the ack of batch 6")
    assert injector.acted == [spec]
    (action,) = injector.actions_of(FaultKind.WITHHOLD_ACKS)
    assert (action.table, action.stream_id, action.detail) == (
        "c.s.t",
        "stream-1",
        "withheld the ack of batch 6",
    )
    assert injector.actions_of(FaultKind.DELAY_ACKS) == []


def test_fault_file_round_trip_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text(
        json.dumps([{"kind": "abort", "after_batches": 3, "status": "UNAVAILABLE"}, {"kind": "crash"}])
    )
    specs = load_faults(path)
    assert [s.kind for s in specs] == [FaultKind.ABORT, FaultKind.CRASH]
    path.write_text(json.dumps([{"kind": "abort", "streams": 0}]))
    with pytest.raises(ValidationError, match="streams"):
        load_faults(path)


def test_throttle_holds_a_stream_to_its_rate() -> None:
    throttle = Throttle(mb_s=10.0)
    start = time.monotonic()
    for _ in range(4):
        throttle.consume(500_000)  # 2 MB at 10 MB/s: at least 0.2 s
    assert time.monotonic() - start >= 0.19
    Throttle(None).consume(10**12)  # unlimited returns at once


def test_stream_limiter_counts_per_table() -> None:
    limiter = StreamLimiter(1)
    assert limiter.acquire("c.s.t") and not limiter.acquire("C.s.t") and limiter.acquire("c.s.u")
    limiter.release("c.s.t")
    assert limiter.acquire("c.s.t")


def test_delayed_acks_still_arrive_and_limited_stream_still_delivers(warehouse: Path) -> None:
    config = EmulatorConfig(time_to_table_s=0.2, per_stream_mb_s=50.0)
    delay = FaultSpec(kind=FaultKind.DELAY_ACKS, after_batches=1, delay_s=0.3)
    with Emulator(str(warehouse), config, faults=[delay], iceberg=False) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        start = time.monotonic()
        last = [stream.ingest_batch(events([i])) for i in range(3)][-1]
        stream.wait_for_offset(last)
        assert time.monotonic() - start >= 0.3
        stream.close()
        emu.materialize_now(TABLE)
        # The fault acted on the batches after the first, each ack on its own (no coalescing).
        delayed = emu.faults.actions_of(FaultKind.DELAY_ACKS)
        assert [a.detail for a in delayed] == [f"delayed the ack of batch {n} by 0.3 s" for n in (2, 3)], (
            "the delay fault never acted"
        )
        assert {a.table for a in delayed} == {TABLE}
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [0, 1, 2]


def test_a_delayed_commit_keeps_acknowledged_batches_out_of_delta_until_it_ends(warehouse: Path) -> None:
    """Acknowledged, durable, and not in the table: neither the materialiser's ticks nor
    ``materialize_now`` commit the held batches before ``delay_s``; the batch before them commits."""
    hold_s = 3.0
    config = EmulatorConfig(time_to_table_s=0.1)
    late = FaultSpec(kind=FaultKind.DELAY_COMMIT, after_batches=1, delay_s=hold_s)
    with Emulator(str(warehouse), config, faults=[late], iceberg=False) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA)
        held_from = time.monotonic()
        last = [stream.ingest_batch(events([i])) for i in range(3)][-1]
        stream.wait_for_offset(last)  # all three acknowledged
        stream.close()
        emu.materialize_now(TABLE)
        assert time.monotonic() - held_from < hold_s, "too slow to see the hold: raise hold_s"
        assert sorted(read_table(warehouse).column("id").to_pylist()) == [0]
        held = emu.faults.actions_of(FaultKind.DELAY_COMMIT)
        assert [a.detail.split(" (")[0] for a in held] == ["held batch 2", "held batch 3"], held
        while time.monotonic() - held_from < hold_s + 0.5:
            time.sleep(0.1)
        emu.materialize_now(TABLE)
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [0, 1, 2]


def test_per_stream_throughput_limit_holds_back_an_sdk_stream(warehouse: Path) -> None:
    limit_mb_s = 1.0
    config = EmulatorConfig(time_to_table_s=0.2, per_stream_mb_s=limit_mb_s)
    rows = 2_000
    batches = [
        pa.record_batch(
            {
                "id": pa.array(range(k * rows, (k + 1) * rows), pa.int64()),
                "name": ["x" * 100] * rows,
                "score": [0.5] * rows,
            },
            schema=SCHEMA,
        )
        for k in range(8)
    ]
    # Uncompressed IPC bodies are the buffers plus padding, so this undercounts what the throttle meters.
    sent_bytes = sum(b.nbytes for b in batches)
    with Emulator(str(warehouse), config, iceberg=False) as emu:
        stream = open_arrow(emu, TABLE, SCHEMA, ipc_compression=IPCCompression.NONE)
        start = time.monotonic()
        for batch in batches:
            stream.ingest_batch(batch)
        stream.flush()
        elapsed = time.monotonic() - start
        stream.close()
        emu.materialize_now(TABLE)
    # Only a lower bound: a busy machine may be slower, but nothing may beat the limit by much.
    floor_s = 0.6 * sent_bytes / (limit_mb_s * 1_000_000)
    assert elapsed >= floor_s, f"{sent_bytes} bytes in {elapsed:.2f}s beat the {limit_mb_s} MB/s limit"
    assert read_table(warehouse).num_rows == 8 * rows


def test_faults_from_the_toml_config_file(tmp_path: Path) -> None:
    path = tmp_path / "zerobus.toml"
    path.write_text(
        '[zerobus]\nwarehouse = "wh"\n\n'
        '[[zerobus_emulator_faults]]\nkind = "rotate"\nafter_batches = 5\ngrace_ms = 200\n\n'
        '[[zerobus_emulator_faults]]\nkind = "reject_open"\nstatus = "RESOURCE_EXHAUSTED"\nstreams = 3\n'
    )
    specs = load_faults(path)
    assert [(s.kind, s.streams) for s in specs] == [(FaultKind.ROTATE, 1), (FaultKind.REJECT_OPEN, 3)]
    (tmp_path / "plain.toml").write_text('[zerobus]\nwarehouse = "wh"\n')
    assert load_faults(tmp_path / "plain.toml") == []
