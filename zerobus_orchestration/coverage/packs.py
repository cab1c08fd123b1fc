"""The packed form of a key's content digests: many ``RangeDigest`` records in one ``bytes`` value.

A settled key's digests are packed into one row of ``coverage_digest_packs`` (``coverage/compaction.py``)
instead of one row per delivered batch: each record still vouches for its own range, so a resume checks
its input exactly as before, and a mismatch still names the range whose rows differ. What the rows repeat
(the table, sink, source and partition, their index entries) is kept once per key instead of once per
batch: about 35 bytes per batch instead of about 290 on a daily partition's key.

Layout (little-endian), version 1: one byte ``1``, then per record ``start``, ``end``, ``rows`` (int64),
the number of runs (uint32, 0 when the record held every position of ``[start, end)``), each run's
``start`` and ``end`` (int64), the digest's length (uint8) and its bytes. Every record of a pack has the
pack's algorithm.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

from zerobus_orchestration import intervals
from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.errors import ZerobusOrchestrationError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange

VERSION = 1
_HEAD = struct.Struct("<qqqI")
_RUN = struct.Struct("<qq")


class PackError(ZerobusOrchestrationError, ValueError):
    """A packed body this release cannot read (damaged, or written by a later release)."""


def pack_digests(digests: Iterable[RangeDigest]) -> tuple[str, int, bytes]:
    """``(algorithm, entries, body)`` of ``digests``, which must share one algorithm (ValueError else)."""
    out = bytearray([VERSION])
    algorithm: str | None = None
    entries = 0
    for digest in digests:
        if algorithm is None:
            algorithm = digest.algorithm
        elif digest.algorithm != algorithm:
            raise ValueError(f"one pack holds one algorithm: {algorithm!r} and {digest.algorithm!r}")
        if len(digest.digest) > 255:
            raise ValueError(f"a digest of {len(digest.digest)} bytes does not fit a pack (255 at most)")
        runs = digest.runs or ()
        out += _HEAD.pack(digest.span.start, digest.span.end, digest.rows, len(runs))
        for run in runs:
            out += _RUN.pack(run.start, run.end)
        out.append(len(digest.digest))
        out += digest.digest
        entries += 1
    if algorithm is None:
        raise ValueError("nothing to pack")
    return algorithm, entries, bytes(out)


def unpack_digests(key: CoverageKey, algorithm: str, body: bytes) -> tuple[RangeDigest, ...]:
    """The records ``pack_digests`` packed into ``body``, in their packed order (``seq`` 0)."""
    if not body or body[0] != VERSION:
        raise PackError(
            f"{key}: a packed digest body of version {body[0] if body else None!r}; this release reads "
            f"version {VERSION}. Fix: upgrade zerobus-orchestration, or point zerobus.coverage.location "
            "at a new file"
        )
    digests: list[RangeDigest] = []
    at = 1
    try:
        while at < len(body):
            start, end, rows, count = _HEAD.unpack_from(body, at)
            at += _HEAD.size
            runs = []
            for _ in range(count):
                run_start, run_end = _RUN.unpack_from(body, at)
                runs.append(OffsetRange(run_start, run_end))
                at += _RUN.size
            size = body[at]
            value = body[at + 1 : at + 1 + size]
            if len(value) != size:
                raise PackError(f"{key}: a packed digest body ends inside a record")
            at += 1 + size
            exact = tuple(runs) if count else None
            digests.append(RangeDigest(key, OffsetRange(start, end), exact, rows, value, algorithm))
    except (struct.error, IndexError) as exc:
        raise PackError(f"{key}: a packed digest body ends inside a record ({exc})") from exc
    return tuple(digests)


def latest_records(digests: Iterable[RangeDigest]) -> list[RangeDigest]:
    """The records a resume checks: the latest record (highest ``seq``) wins, and older ones that
    overlap it are superseded (a range sent again with ``resume=False`` has two records)."""
    every = list(digests)
    envelopes = sorted((d.span for d in every), key=lambda span: span.start)
    if all(a.end <= b.start for a, b in itertools.pairwise(envelopes)):
        return every  # the usual case: every batch was delivered once, nothing supersedes anything
    chosen: list[RangeDigest] = []
    claimed: tuple[OffsetRange, ...] = ()
    for digest in sorted(every, key=lambda d: d.seq, reverse=True):
        ranges = digest.ranges()
        if any(intervals.clip(claimed, r.start, r.end) for r in ranges):
            continue  # re-sent later: the later record describes what the input must hold
        chosen.append(digest)
        claimed = intervals.union(claimed, ranges)
    return chosen
