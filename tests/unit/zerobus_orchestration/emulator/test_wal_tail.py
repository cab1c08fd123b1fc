"""The write-ahead log hands the materialiser what it just wrote from memory, bounded, durable only.

Real files in a temporary folder; reading from disk is made to fail to show where records come from.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from zerobus_orchestration.emulator import wal as wal_module
from zerobus_orchestration.emulator.wal import TableWal


def _disk_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Fail every read of a segment, recording its start position."""
    reads: list[int] = []

    def refuse(*args: object) -> None:
        reads.append(1)
        raise AssertionError("read the segment from disk")

    monkeypatch.setattr(wal_module, "_read_records", refuse)
    return reads


def test_records_just_written_are_read_from_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    for i in range(3):
        wal.append_durable(f"p{i}".encode())
    reads = _disk_reads(monkeypatch)
    assert [(e.seq, e.payload) for e in wal.read_after(0, 1 << 20)] == [(1, b"p0"), (2, b"p1"), (3, b"p2")]
    assert [e.seq for e in wal.read_after(1, 4)] == [2, 3]  # the byte budget still bounds a read
    assert [e.seq for e in wal.read_after(1, 1)] == [2]  # at least one record
    assert reads == []
    wal.close()


def test_records_not_yet_durable_are_not_read_from_memory(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    wal.append_durable(b"durable")
    wal.append(b"written-only")
    assert [e.payload for e in wal.read_after(0, 1 << 20)] == [b"durable"]
    wal.close()


def test_records_beyond_the_memory_bound_come_from_disk_in_order(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "w", committed=0, tail_bytes=10)
    payloads = [b"aaaa", b"bbbb", b"cccc", b"dddd"]  # the first two fit in 10 bytes, the others do not
    for p in payloads:
        wal.append_durable(p)
    got = []
    position = 0
    while entries := wal.read_after(position, 1 << 20):
        got.extend((e.seq, e.payload) for e in entries)
        position = entries[-1].seq
    assert got == list(enumerate(payloads, start=1))
    wal.close()


def test_released_records_free_their_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = TableWal(tmp_path / "w", committed=0, tail_bytes=8)
    wal.append_durable(b"12345678")
    wal.release_through(1)  # committed to Delta: its memory is given back
    wal.append_durable(b"abcdefgh")  # fits again only if it was
    reads = _disk_reads(monkeypatch)
    assert [(e.seq, e.payload) for e in wal.read_after(1, 1 << 20)] == [(2, b"abcdefgh")]
    assert reads == []
    wal.close()


def test_a_reopened_log_reads_its_records_from_disk(tmp_path: Path) -> None:
    wal = TableWal(tmp_path / "w", committed=0)
    wal.append_durable(b"before-restart")
    wal.close()
    reopened = TableWal(tmp_path / "w", committed=0)
    assert [e.payload for e in reopened.read_after(0, 1 << 20)] == [b"before-restart"]
    reopened.close()


def test_records_read_back_from_disk_outlive_their_deleted_segment(tmp_path: Path) -> None:
    """Read-back payloads are views of the mapped segment: committing and deleting it keeps them intact."""
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0, tail_bytes=0, segment_bytes=64)  # nothing kept in memory
    payloads = [bytes([65 + i]) * 40 for i in range(4)]
    for p in payloads:
        wal.append_durable(p)
        wal.release_through(0)  # rolls the segment once it is large: each record in its own
    entries = wal.read_after(0, 1 << 20)
    assert all(isinstance(e.payload, memoryview) for e in entries)  # from disk, not from memory
    sealed = sorted(directory.glob("*.wal"))[:-1]
    wal.release_through(4)
    assert not any(p.exists() for p in sealed)  # the segments they were read from are gone
    assert [bytes(e.payload) for e in entries] == payloads
    wal.close()


def test_a_read_back_maps_no_more_than_the_records_complete_when_it_began(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    wal = TableWal(directory, committed=0, tail_bytes=0)
    wal.append_durable(b"durable")
    segment = sorted(directory.glob("*.wal"))[-1]
    complete = segment.stat().st_size
    with open(segment, "ab") as fh:  # bytes past the last append (a partial write in progress)
        fh.write(b"ZBW2" + b"\x00" * 4000)
    [entry] = wal.read_after(0, 1 << 20)
    assert isinstance(entry.payload, memoryview) and bytes(entry.payload) == b"durable"
    mapping = entry.payload.obj
    assert isinstance(mapping, mmap.mmap) and len(mapping) == complete  # cut at the complete records
    wal.close()
