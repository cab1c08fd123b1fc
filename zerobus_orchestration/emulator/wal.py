"""Per-table write-ahead log: an acknowledgement from the emulator means the batch is on disk.

Layout: ``<wal root>/<percent-encoded catalog.schema.table>/<first seq, 20 digits>.wal`` segments of
records ``magic | seq u64 | length u32 | checksum | payload``. The magic names the record's format:
``ZBW2`` (written now) checks the payload with XXH3-64 (u64), ``ZBW1`` (written by earlier versions,
still read and replayed, also mixed with ``ZBW2`` records in one segment) with CRC-32 (u32). zlib's
CRC-32 ran at ~2 GB/s, ~0.5 CPU s per GB in the process acknowledging batches; XXH3 is an order of
magnitude faster. An earlier version reading a ``ZBW2`` record takes it for a torn tail: downgrading
the emulator needs its WALs committed first (a clean stop commits everything). Sequence numbers are
the WAL *position*: dense, starting after the position the materialiser last committed to Delta (so
a fully truncated log continues where the table left off and replay never reuses a number).

Group commit: ``append`` only writes; ``wait_durable(seq)`` makes one caller the leader, which fsyncs
once for every record written so far while the others wait on the condition. A torn tail (a crash in
the middle of a write, never acknowledged) is cut off when the log is reopened.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import xxhash

from zerobus_orchestration.emulator.errors import WalCorruptError, WalUnusableError
from zerobus_orchestration.owner_only import open_private, private_dir
from zerobus_orchestration.tables import table_of_wal_dir as table_of_wal_dir  # the layout is the warehouse's
from zerobus_orchestration.tables import wal_dir_name as wal_dir_name

_MAGIC_BYTES = 4


@dataclass(frozen=True)
class _Format:
    """One record format: its magic, its header (magic, seq, payload length, checksum), its checksum."""

    magic: bytes
    header: struct.Struct
    checksum: Callable[[bytes | memoryview], int]


_CRC32 = _Format(b"ZBW1", struct.Struct("<4sQII"), zlib.crc32)  # read only (earlier versions' logs)
_XXH3 = _Format(b"ZBW2", struct.Struct("<4sQIQ"), xxhash.xxh3_64_intdigest)
_WRITTEN = _XXH3
_FORMATS = {f.magic: f for f in (_CRC32, _XXH3)}
_SUFFIX = ".wal"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
# Payloads kept in memory after they are written, until committed: the materialiser takes them from
# here instead of reading them back (measured ~0.9 CPU s per GB for the read, its fresh buffers and
# the CRC, in the process that acknowledges batches). Beyond this, records are read from disk, as
# views of the mapped segment (``_read_records``): a 4-stream burst outgrows this bound, and then
# read back more than half of what it committed.
DEFAULT_TAIL_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class WalEntry:
    seq: int
    payload: bytes | memoryview  # a view of the mapped segment when read back from disk


@dataclass
class _Segment:
    first_seq: int
    path: Path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _records(data: bytes, start: int = 0) -> Iterator[tuple[WalEntry, int]]:
    """Valid records from byte ``start`` with the offset just past each (a torn tail ends the walk)."""
    pos = start
    while pos + _MAGIC_BYTES <= len(data):
        fmt = _FORMATS.get(data[pos : pos + _MAGIC_BYTES])
        if fmt is None or pos + fmt.header.size > len(data):
            return
        _, seq, length, checksum = fmt.header.unpack_from(data, pos)
        end = pos + fmt.header.size + length
        if end > len(data):
            return
        payload = data[pos + fmt.header.size : end]
        if fmt.checksum(payload) != checksum:
            return
        yield WalEntry(seq, payload), end
        pos = end


def _scan(path: Path) -> tuple[list[WalEntry], int]:
    """Valid records of a segment and the byte length they cover."""
    entries: list[WalEntry] = []
    valid = 0
    for entry, end in _records(path.read_bytes()):
        entries.append(entry)
        valid = end
    return entries, valid


def _read_records(
    path: Path,
    offset: int,
    position: int,
    limit: int,
    max_bytes: int,
    taken: int,
    any_taken: bool,
    complete: int | None,
) -> Iterator[tuple[WalEntry, int]]:
    """Records with ``position`` < seq <= ``limit`` from byte ``offset`` while ``max_bytes`` allows.

    ``taken`` bytes (``any_taken``: at least one record) were read before; the first record is always
    read. Payloads are views of the segment mapped read-only, not copies: in a burst the materialiser
    reads back most of what it commits (whatever outgrew the in-memory tail), and reading each payload
    into fresh memory cost a copy and a page fault per page. The pages are the ones the page cache
    already holds; a view keeps its mapping alive (past the segment's deletion) until Delta has it.
    ``complete``: the bytes of the active segment its records filled when ``limit`` was taken; nothing
    past them is mapped, since a failed append's partial record there may be cut off meanwhile (and a
    mapped page past the end of a file faults).
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if complete is not None:
            size = min(size, complete)
        if size <= offset:
            return
        data = memoryview(mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ))
    pos = offset
    while pos + _MAGIC_BYTES <= size:
        fmt = _FORMATS.get(bytes(data[pos : pos + _MAGIC_BYTES]))
        if fmt is None or pos + fmt.header.size > size:
            return
        _, seq, length, checksum = fmt.header.unpack_from(data, pos)
        if seq > limit or (any_taken and taken + length > max_bytes):
            return
        end = pos + fmt.header.size + length
        if end > size:
            return
        if seq > position:
            payload = data[pos + fmt.header.size : end]
            if fmt.checksum(payload) != checksum:
                return  # a torn tail (never acknowledged)
            taken += length
            any_taken = True
            yield WalEntry(seq, payload), end
        pos = end


@dataclass(frozen=True)
class _Cursor:
    """Where the last read stopped, so the next one does not re-read the segment from its start."""

    segment_first_seq: int
    offset: int
    seq: int


class TableWal:
    """The write-ahead log of one table. Thread-safe; many streams append concurrently."""

    def __init__(
        self,
        directory: Path,
        *,
        committed: int,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._tail_limit = tail_bytes
        self._tail: dict[int, bytes] = {}  # seq -> payload written by this process, not yet released
        self._tail_bytes = 0
        private_dir(directory)  # acknowledged rows wait here: owner-only
        self._cond = threading.Condition()
        self._syncing = False
        self._segments = self._recover()
        last = self._last_seq_on_disk()
        self._written = max(last, committed)
        self._durable = self._written  # everything recovered is on disk already
        self._closed = False
        self._broken: str | None = None  # why appends and acks are refused (failed fsync or uncut write)
        self._cursor: _Cursor | None = None
        if not self._segments:
            self._segments.append(self._new_segment(self._written + 1))
        active = self._segments[-1]
        self._fd = open_private(active.path, os.O_WRONLY | os.O_APPEND)
        self._active_bytes = os.fstat(self._fd).st_size

    # -- recovery -------------------------------------------------------------------------------
    def _recover(self) -> list[_Segment]:
        segments = sorted(
            (_Segment(int(p.name[: -len(_SUFFIX)]), p) for p in self.directory.glob(f"*{_SUFFIX}")),
            key=lambda s: s.first_seq,
        )
        for i, seg in enumerate(segments):
            _, valid = _scan(seg.path)
            size = seg.path.stat().st_size
            if valid == size:
                continue
            if i != len(segments) - 1:
                raise WalCorruptError(f"WAL segment {seg.path} is corrupt at byte {valid} of {size}")
            with open(seg.path, "r+b") as fh:  # cut the torn, never-acknowledged tail
                fh.truncate(valid)
                os.fsync(fh.fileno())
        return segments

    def _last_seq_on_disk(self) -> int:
        for seg in reversed(self._segments):
            entries, _ = _scan(seg.path)
            if entries:
                return entries[-1].seq
        return 0

    def _new_segment(self, first_seq: int) -> _Segment:
        path = self.directory / f"{first_seq:020d}{_SUFFIX}"
        os.close(open_private(path, os.O_WRONLY))
        _fsync_dir(self.directory)
        return _Segment(first_seq, path)

    # -- writing --------------------------------------------------------------------------------
    def append(self, payload: bytes) -> int:
        """Write one record (not yet durable) and return its position."""
        checksum = _WRITTEN.checksum(payload)  # outside the lock: other streams append meanwhile
        with self._cond:
            if self._closed:
                raise RuntimeError(f"WAL {self.directory} is closed")
            if self._broken is not None:
                raise WalUnusableError(
                    f"WAL {self.directory} is unusable after a failed write: {self._broken}"
                )
            seq = self._written + 1
            header = _WRITTEN.header.pack(_WRITTEN.magic, seq, len(payload), checksum)
            size = len(header) + len(payload)
            try:
                # Vectored: the payload is not copied into a record first (it can be megabytes).
                written = os.writev(self._fd, (header, payload))
                if written != size:
                    raise OSError(errno.EIO, f"short WAL write ({written} of {size} bytes)")
            except OSError as exc:
                # A partial record left in place would end every later read and recovery at it, so
                # records acknowledged after it would never reach Delta: cut it off, or stop appending.
                try:
                    os.ftruncate(self._fd, self._active_bytes)
                except OSError as cut:
                    self._broken = f"{exc}; truncating the partial record also failed: {cut}"
                raise
            self._written = seq
            self._active_bytes += size
            if self._tail_bytes + len(payload) <= self._tail_limit:
                self._tail[seq] = payload
                self._tail_bytes += len(payload)
            return seq

    def wait_durable(self, seq: int) -> None:
        """Return once record ``seq`` is fsync'd; one fsync covers every record written meanwhile."""
        with self._cond:
            while self._durable < seq:
                if self._broken is not None:
                    raise WalUnusableError(
                        f"WAL {self.directory} cannot make records durable: {self._broken}"
                    )
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                target, fd = self._written, self._fd
                self._cond.release()
                failure: OSError | None = None
                synced = False
                try:
                    os.fsync(fd)
                    synced = True
                except OSError as exc:
                    failure = exc
                    raise
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    if synced:
                        self._durable = max(self._durable, target)
                    elif failure is not None:
                        # After a failed fsync the kernel may have dropped the dirty pages, and a
                        # retried fsync can report success anyway: nothing unsynced may ever be acked.
                        self._broken = f"fsync failed: {failure}"
                    self._cond.notify_all()

    def append_durable(self, payload: bytes) -> int:
        seq = self.append(payload)
        self.wait_durable(seq)
        return seq

    @property
    def broken(self) -> str | None:
        """Why the log refuses appends and acks for the rest of this process; None while healthy."""
        with self._cond:
            return self._broken

    @property
    def durable_seq(self) -> int:
        with self._cond:
            return self._durable

    @property
    def written_seq(self) -> int:
        """The position of the last record written (durable or not); every later one is greater."""
        with self._cond:
            return self._written

    # -- reading and truncation -------------------------------------------------------------------
    def read_after(self, position: int, max_bytes: int) -> list[WalEntry]:
        """Durable records with seq > ``position``, in order, about ``max_bytes`` at most (at least one).

        From memory while the records are there (see ``DEFAULT_TAIL_BYTES``), else from disk.
        """
        with self._cond:
            limit = self._durable
            segments = list(self._segments)
            complete = self._active_bytes  # no partial record now: appends write and cut under the lock
            out, done = self._from_tail(position, limit, max_bytes)
        if done:
            return out
        size = sum(len(e.payload) for e in out)
        if out:  # the rest (a record not kept in memory, and what follows it) from disk
            position = out[-1].seq
        cursor = self._cursor  # only valid when it stopped at ``position``
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].first_seq if i + 1 < len(segments) else None
            if nxt is not None and nxt <= position + 1:
                continue
            resume = (
                cursor is not None and cursor.segment_first_seq == seg.first_seq and cursor.seq == position
            )
            start = cursor.offset if resume and cursor is not None else 0
            bound = complete if i == len(segments) - 1 else None
            records = _read_records(seg.path, start, position, limit, max_bytes, size, bool(out), bound)
            for entry, end in records:
                out.append(entry)
                size += len(entry.payload)
                self._cursor = _Cursor(seg.first_seq, end, entry.seq)
                if entry.seq >= limit or size >= max_bytes:
                    return out
        return out

    def _from_tail(self, position: int, limit: int, max_bytes: int) -> tuple[list[WalEntry], bool]:
        """Records after ``position`` kept in memory, and whether that is the whole answer."""
        out: list[WalEntry] = []
        size = 0
        seq = position + 1
        while seq <= limit:
            payload = self._tail.get(seq)
            if payload is None:
                return out, False
            if out and size + len(payload) > max_bytes:
                return out, True
            out.append(WalEntry(seq, payload))
            size += len(payload)
            seq += 1
        return out, True

    def _forget_tail(self, through: int) -> None:
        for seq in [s for s in self._tail if s <= through]:
            self._tail_bytes -= len(self._tail.pop(seq))

    def release_through(self, position: int) -> None:
        """Forget records up to ``position`` (committed to Delta): delete or roll fully-covered segments."""
        with self._cond:
            while self._syncing:
                self._cond.wait()
            self._forget_tail(position)
            if self._written <= position and self._active_bytes >= self.segment_bytes // 4:
                os.fsync(self._fd)
                os.close(self._fd)
                self._segments.append(self._new_segment(self._written + 1))
                self._fd = open_private(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
                self._active_bytes = 0
            elif self._active_bytes >= self.segment_bytes:
                os.fsync(self._fd)
                if self._broken is None:  # a later fsync's success does not undo an earlier failure
                    self._durable = self._written
                os.close(self._fd)
                self._segments.append(self._new_segment(self._written + 1))
                self._fd = open_private(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
                self._active_bytes = 0
            keep: list[_Segment] = []
            for i, seg in enumerate(self._segments):
                is_active = i == len(self._segments) - 1
                covered = not is_active and self._segments[i + 1].first_seq - 1 <= position
                if covered:
                    seg.path.unlink(missing_ok=True)
                else:
                    keep.append(seg)
            self._segments = keep

    def excise(self, seq: int) -> WalEntry:
        """Remove durable record ``seq`` from the log and return it (quarantining a batch Delta refuses).

        Its segment is rewritten without it (temporary file, fsync, rename, fsync of the folder), so a
        crash leaves either the old or the new segment. The caller keeps the returned bytes first.
        """
        with self._cond:
            while self._syncing:
                self._cond.wait()
            if self._closed:
                raise RuntimeError(f"WAL {self.directory} is closed")
            if seq > self._durable:
                raise ValueError(f"WAL {self.directory}: position {seq} is not durable, cannot excise it")
            for i, seg in enumerate(self._segments):
                data = seg.path.read_bytes()
                kept = bytearray()
                found: WalEntry | None = None
                start = 0
                for entry, end in _records(data):
                    if entry.seq == seq:
                        found = entry
                    else:
                        kept += data[start:end]
                    start = end
                if found is None:
                    continue
                kept += data[start:]  # a torn tail of the active segment stays a torn tail
                if seq in self._tail:
                    self._tail_bytes -= len(self._tail.pop(seq))
                tmp = seg.path.with_name(seg.path.name + ".tmp")
                fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(kept)
                    fh.flush()
                    os.fsync(fh.fileno())
                active = i == len(self._segments) - 1
                if active:
                    os.close(self._fd)
                os.replace(tmp, seg.path)
                _fsync_dir(self.directory)
                if active:
                    self._fd = open_private(seg.path, os.O_WRONLY | os.O_APPEND)
                    self._active_bytes = len(kept)
                self._cursor = None  # byte offsets in the rewritten segment moved
                return found
        raise KeyError(f"WAL {self.directory} holds no record at position {seq}")

    def close(self) -> None:
        with self._cond:
            while self._syncing:
                self._cond.wait()
            if self._closed:
                return
            self._closed = True
            self._tail.clear()
            self._tail_bytes = 0
            os.fsync(self._fd)
            if self._broken is None:
                self._durable = self._written
            os.close(self._fd)
