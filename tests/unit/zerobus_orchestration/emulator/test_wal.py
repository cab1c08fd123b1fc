"""The write-ahead log: group commit, torn tails, positions that continue after truncation."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from zerobus_orchestration.emulator import wal as wal_module
from zerobus_orchestration.emulator.errors import WalCorruptError
from zerobus_orchestration.emulator.wal import TableWal, table_of_wal_dir, wal_dir_name


def test_positions_are_dense_and_reads_return_durable_records_in_order(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    seqs = [wal.append(f"p{i}".encode()) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert wal.read_after(0, 1 << 20) == []  # nothing is durable yet
    wal.wait_durable(5)
    assert [e.payload for e in wal.read_after(2, 1 << 20)] == [b"p2", b"p3", b"p4"]
    wal.close()


def test_group_commit_one_fsync_covers_concurrent_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real_fsync = os.fsync
    gate = threading.Event()

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        gate.wait(2)  # hold the first fsync until every writer has appended
        real_fsync(fd)

    wal = TableWal(tmp_path / "w", committed=0)
    monkeypatch.setattr(wal_module.os, "fsync", slow_fsync)
    first = wal.append(b"a")
    leader = threading.Thread(target=wal.wait_durable, args=(first,))
    leader.start()
    while not calls:
        threading.Event().wait(0.001)
    later = [wal.append(f"b{i}".encode()) for i in range(8)]
    waiters = [threading.Thread(target=wal.wait_durable, args=(s,)) for s in later]
    for t in waiters:
        t.start()
    gate.set()
    leader.join()
    for t in waiters:
        t.join()
    # The leader's fsync covered only "a"; one more fsync covered all eight later records.
    assert len(calls) == 2
    assert wal.durable_seq == 9
    monkeypatch.setattr(wal_module.os, "fsync", real_fsync)
    wal.close()


def test_torn_tail_is_cut_on_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0)
    wal.append_durable(b"kept-1")
    wal.append_durable(b"kept-2")
    wal.close()
    segment = sorted(directory.glob("*.wal"))[-1]
    with open(segment, "ab") as fh:
        fh.write(b"ZBW1\x03\x00\x00\x00\x00\x00\x00\x00\xff\x00\x00\x00")  # a header with no payload
    reopened = TableWal(directory, committed=0)
    assert [e.payload for e in reopened.read_after(0, 1 << 20)] == [b"kept-1", b"kept-2"]
    assert reopened.append_durable(b"next") == 3
    reopened.close()


def test_positions_continue_after_the_committed_floor(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0)
    for i in range(3):
        wal.append_durable(f"{i}".encode())
    wal.release_through(3)
    wal.close()
    # Everything was committed and released; a reopened log must not reuse positions 1..3.
    reopened = TableWal(directory, committed=3)
    assert reopened.append_durable(b"new") == 4
    assert [e.seq for e in reopened.read_after(3, 1 << 20)] == [4]
    reopened.close()


def test_release_deletes_sealed_segments_only_when_committed(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0, segment_bytes=64)
    for i in range(6):
        wal.append_durable(b"x" * 40 + str(i).encode())
        wal.release_through(0)  # rolls segments once they are large, deletes nothing
    segments = sorted(directory.glob("*.wal"))
    assert len(segments) > 2
    assert [e.seq for e in wal.read_after(0, 1 << 20)] == [1, 2, 3, 4, 5, 6]
    wal.release_through(4)
    assert [e.seq for e in wal.read_after(4, 1 << 20)] == [5, 6]
    assert len(sorted(directory.glob("*.wal"))) < len(segments)
    wal.close()


def test_corrupt_sealed_segment_refuses_to_open(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0, segment_bytes=64)
    for i in range(4):
        wal.append_durable(b"y" * 40 + str(i).encode())
        wal.release_through(0)
    wal.close()
    first = sorted(directory.glob("*.wal"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match="corrupt"):
        TableWal(directory, committed=0)


def test_wal_dir_names_round_trip_hostile_table_names() -> None:
    for name in ("main.default.events", "c.s.`a/b`", "c.s.t\nx"):
        encoded = wal_dir_name(name)
        assert "/" not in encoded and "\n" not in encoded
        assert table_of_wal_dir(encoded) == name


def test_incremental_reads_resume_where_the_last_one_stopped(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    for i in range(3):
        wal.append_durable(f"a{i}".encode())
    first = wal.read_after(0, 1 << 20)
    assert [e.seq for e in first] == [1, 2, 3]
    assert wal.read_after(3, 1 << 20) == []
    wal.append_durable(b"b")
    assert [e.payload for e in wal.read_after(3, 1 << 20)] == [b"b"]
    assert [e.seq for e in wal.read_after(1, 1 << 20)] == [2, 3, 4]  # an older position still works
    assert [e.seq for e in wal.read_after(0, 3)] == [1]  # max_bytes bounds a read (at least one record)
    wal.close()


def test_a_failed_partial_write_does_not_hide_later_acknowledged_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Disk full mid-record: half the bytes land, then write fails. Records acknowledged afterwards
    # must still be readable and must survive a reopen (a torn record left in the middle would end
    # both the materialiser's read and recovery at it, dropping them).
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0)
    wal.append_durable(b"first")
    real_writev = os.writev

    def half_then_enospc(fd: int, buffers: Sequence[bytes]) -> int:
        data = b"".join(buffers)
        os.write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wal_module.os, "writev", half_then_enospc)
    with pytest.raises(OSError, match="No space"):
        wal.append(b"lost-before-ack")
    monkeypatch.setattr(wal_module.os, "writev", real_writev)
    assert directory.joinpath(f"{1:020d}.wal").stat().st_size == 24 + len(
        b"first"
    )  # the half was cut (ZBW2 header: 24 bytes)
    seq = wal.append_durable(b"acknowledged")
    assert [e.payload for e in wal.read_after(0, 1 << 20)] == [b"first", b"acknowledged"]
    wal.close()
    reopened = TableWal(directory, committed=0)
    assert [(e.seq, e.payload) for e in reopened.read_after(0, 1 << 20)] == [
        (1, b"first"),
        (seq, b"acknowledged"),
    ]
    reopened.close()


def test_a_short_write_is_refused_and_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    real_writev = os.writev
    monkeypatch.setattr(wal_module.os, "writev", lambda fd, buffers: os.write(fd, b"".join(buffers)[:3]))
    with pytest.raises(OSError, match="short WAL write"):
        wal.append(b"payload")
    monkeypatch.setattr(wal_module.os, "writev", real_writev)
    wal.append_durable(b"next")
    assert [e.payload for e in wal.read_after(0, 1 << 20)] == [b"next"]
    wal.close()


def test_a_failed_fsync_is_never_reported_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The group-commit leader's fsync fails: neither it nor any later waiter may treat the records as
    # durable (an ack would follow), and the WAL refuses further appends.
    wal = TableWal(tmp_path / "w", committed=0)
    seq = wal.append(b"unsynced")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(wal_module.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        wal.wait_durable(seq)
    monkeypatch.undo()
    assert wal.durable_seq == 0
    with pytest.raises(RuntimeError, match="fsync failed"):
        wal.wait_durable(seq)  # a second waiter must not ack on a retried fsync
    with pytest.raises(RuntimeError, match="unusable"):
        wal.append(b"more")
    assert wal.read_after(0, 1 << 20) == []
