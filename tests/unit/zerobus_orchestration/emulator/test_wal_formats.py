"""WAL record formats: logs written by earlier versions (``ZBW1``, CRC-32) are still read, continued
with ``ZBW2`` (XXH3-64) records, recovered and excised; a torn or corrupt record of either is found."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
import xxhash

from zerobus_orchestration.emulator.errors import WalCorruptError
from zerobus_orchestration.emulator.wal import TableWal

# The format earlier versions wrote, spelled out here (not imported): these bytes are what their logs
# hold on disk, whatever the module's own definitions become.
V1_HEADER = struct.Struct("<4sQII")  # magic, seq, payload length, crc32 of the payload


V2_HEADER = struct.Struct("<4sQIQ")  # magic, seq, payload length, XXH3-64 of the payload


def v1_record(seq: int, payload: bytes) -> bytes:
    return V1_HEADER.pack(b"ZBW1", seq, len(payload), zlib.crc32(payload)) + payload


def v2_record(seq: int, payload: bytes) -> bytes:
    return V2_HEADER.pack(b"ZBW2", seq, len(payload), xxhash.xxh3_64_intdigest(payload)) + payload


def write_v1_segment(directory: Path, first_seq: int, payloads: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{first_seq:020d}.wal"
    path.write_bytes(b"".join(v1_record(first_seq + i, p) for i, p in enumerate(payloads)))
    return path


def test_an_earlier_versions_log_is_read_continued_and_recovered(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    segment = write_v1_segment(directory, 1, [b"old-1", b"old-2", b"old-3"])
    wal = TableWal(directory, committed=0)
    assert wal.durable_seq == 3
    assert [(e.seq, e.payload) for e in wal.read_after(0, 1 << 20)] == [
        (1, b"old-1"),
        (2, b"old-2"),
        (3, b"old-3"),
    ]
    assert wal.append_durable(b"new-4") == 4
    assert wal.append_durable(b"new-5") == 5
    wal.close()
    data = segment.read_bytes()
    old = [v1_record(1, b"old-1"), v1_record(2, b"old-2"), v1_record(3, b"old-3")]
    assert data == b"".join([*old, v2_record(4, b"new-4"), v2_record(5, b"new-5")])  # one segment, both
    reopened = TableWal(directory, committed=0)  # recovery scans the mixed segment; reads from disk
    assert reopened.durable_seq == 5
    assert [e.payload for e in reopened.read_after(0, 1 << 20)] == [
        b"old-1",
        b"old-2",
        b"old-3",
        b"new-4",
        b"new-5",
    ]
    assert [e.payload for e in reopened.read_after(2, 1 << 20)] == [b"old-3", b"new-4", b"new-5"]
    assert reopened.excise(2).payload == b"old-2"  # rewrites the segment, old records kept as they are
    assert [e.seq for e in reopened.read_after(0, 1 << 20)] == [1, 3, 4, 5]
    reopened.close()
    assert segment.read_bytes().count(b"ZBW1") == 2


def test_a_torn_record_after_an_earlier_versions_records_is_cut(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    write_v1_segment(directory, 1, [b"old-1", b"old-2"])
    wal = TableWal(directory, committed=0)
    wal.append_durable(b"new-3")
    wal.close()
    segment = sorted(directory.glob("*.wal"))[-1]
    whole = segment.stat().st_size
    with open(segment, "ab") as fh:  # a crash in the middle of writing record 4: half its payload
        fh.write(v2_record(4, b"x" * 100)[: V2_HEADER.size + 50])
    reopened = TableWal(directory, committed=0)
    assert segment.stat().st_size == whole  # the torn record was cut
    assert [e.payload for e in reopened.read_after(0, 1 << 20)] == [b"old-1", b"old-2", b"new-3"]
    assert reopened.append_durable(b"new-4") == 4
    reopened.close()


@pytest.mark.parametrize("corrupt", [1, 2], ids=["ZBW1 record", "ZBW2 record"])
def test_a_corrupt_record_of_either_format_in_a_sealed_segment_refuses_to_open(
    tmp_path: Path, corrupt: int
) -> None:
    directory = tmp_path / "w"
    directory.mkdir()
    first = directory / f"{1:020d}.wal"  # sealed: record 1 as earlier versions wrote it, record 2 as now
    first.write_bytes(v1_record(1, b"old-1" * 10) + v2_record(2, b"new-2" * 10))
    write_v1_segment(directory, 3, [b"old-3"])
    TableWal(directory, committed=0).close()  # intact, it opens
    data = bytearray(first.read_bytes())
    header = V1_HEADER.size if corrupt == 1 else V2_HEADER.size
    data[data.index(b"ZBW1" if corrupt == 1 else b"ZBW2") + header + 3] ^= 0xFF  # a payload byte
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match="corrupt"):
        TableWal(directory, committed=0)
