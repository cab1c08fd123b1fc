"""Check, while a resume streams its input, that the rows at covered positions are the delivered ones.

``resume.slices.resume_slices`` feeds every input batch here before it decides what to skip. For each
recorded ``RangeDigest`` the checker gathers the input's rows at that range's positions (buffering at
most that range's rows, across batch boundaries), hashes them the way the ack lane did, and raises
``ResumeMismatchError`` on the first range whose rows differ. A re-run may batch its input
differently: digests are canonical over rows, not batches.

Which digests count: records are append-only, so a range sent again with ``resume=False`` has two.
The latest record wins; an older one overlapping it is superseded and not checked. Covered positions
with no digest at all (recorded by a release before digests) are skipped unverified, with a warning.
A record is checked with the algorithm it names (``coverage.digest.ALGORITHMS``: the current one and those of
earlier releases); one of an unknown algorithm (a later release) is not checked, with a warning.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from zerobus_orchestration import intervals
from zerobus_orchestration.coverage.digest import ALGORITHMS, RangeDigest, rows_digest
from zerobus_orchestration.coverage.packs import latest_records
from zerobus_orchestration.ranges import OffsetRange

log = logging.getLogger(__name__)


class _Mismatch(Exception):
    """Internal: the range whose rows differ, and how (turned into ``ResumeMismatchError``)."""

    def __init__(self, span: OffsetRange, detail: str) -> None:
        super().__init__(detail)
        self.span = span
        self.detail = detail


@dataclass
class _Open:
    digest: RangeDigest
    pieces: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    done: bool = False
    _bounds: tuple[np.ndarray, np.ndarray] | None = None

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of the digest's runs, as arrays for a vectorised membership test."""
        if self._bounds is None:
            runs = self.digest.ranges()
            self._bounds = (
                np.fromiter((r.start for r in runs), dtype=np.int64, count=len(runs)),
                np.fromiter((r.end for r in runs), dtype=np.int64, count=len(runs)),
            )
        return self._bounds


class ContentChecker:
    """Verifies the input against ``digests`` as batches stream past (see the module docstring).

    ``offset_column``: positions are that column's values (rows hashed in offset order); else rows
    are positions in input order.
    """

    def __init__(
        self,
        digests: Iterable[RangeDigest],
        covered: Iterable[OffsetRange],
        *,
        offset_column: str | None,
        where: str,
    ) -> None:
        self.offset_column = offset_column
        self.where = where
        chosen = _effective(digests, where)
        self._open = [_Open(d) for d in sorted(chosen, key=lambda d: d.span.start)]
        self._ends = [entry.digest.span.end for entry in self._open]
        # Envelopes of offset-column batches may interleave (their runs never do): then no bisect.
        self._disjoint = all(
            a <= b.digest.span.start for a, b in zip(self._ends, self._open[1:], strict=False)
        )
        self._remaining = len(self._open)
        self.verified = 0
        vouched = intervals.merge(r for d in chosen for r in d.ranges())
        unvouched = _minus(intervals.merge(covered), vouched)
        if unvouched:
            log.warning(
                "%s: %d delivered position(s) (first [%d, %d)) have no content digest (learnt from the "
                "table, recorded by an older release, or not hashable): resuming skips them without checking "
                "the input still holds the delivered rows there",
                where,
                intervals.covered_count(unvouched),
                unvouched[0].start,
                unvouched[0].end,
            )

    @property
    def pending(self) -> bool:
        """Whether some digest is still waiting for rows."""
        return self._remaining > 0

    def first_pending(self) -> OffsetRange | None:
        for entry in self._open:
            if not entry.done:
                return entry.digest.span
        return None

    def feed(self, batch: pa.RecordBatch, start: int, offsets: pa.Array | None) -> None:
        """One input batch: its first row is at position ``start`` (positional) or ``offsets`` gives
        every row's position. Raises ``_Mismatch``."""
        if not self._remaining or batch.num_rows == 0:
            return
        if offsets is None:
            self._feed_positional(batch, start)
        else:
            self._feed_offsets(batch, offsets)

    def finish(self) -> None:
        """The input ended: a positional range it never reached means delivered rows are gone."""
        skipped = 0
        for entry in self._open:
            if entry.done:
                continue
            span, expected = entry.digest.span, entry.digest.rows
            if self.offset_column is None:
                raise _Mismatch(
                    span,
                    f"the input has only {span.start + entry.rows} row(s) but positions [{span.start}, "
                    f"{span.end}) were delivered",
                )
            # Offsets are the source's own identities: absent ones (Kafka retention, a later start)
            # cannot have moved elsewhere, so nothing is skipped wrongly. They just cannot be checked.
            skipped += 1
            if entry.rows:
                log.warning(
                    "%s: the input holds %d of the %d row(s) delivered at offsets [%d, %d); that range "
                    "is not checked",
                    self.where,
                    entry.rows,
                    expected,
                    span.start,
                    span.end,
                )
        if skipped:
            log.info(
                "%s: %d delivered offset range(s) are not in the input and were not checked",
                self.where,
                skipped,
            )

    # -- internals ----------------------------------------------------------------------------------

    def _candidates(self, low: int, high: int) -> Iterable[_Open]:
        """Open entries whose envelope meets ``[low, high)`` (entries are disjoint, sorted by start)."""
        first = bisect.bisect_right(self._ends, low) if self._disjoint else 0
        for entry in self._open[first:]:
            if entry.digest.span.start >= high:
                break
            if not entry.done and entry.digest.span.end > low:
                yield entry

    def _feed_positional(self, batch: pa.RecordBatch, start: int) -> None:
        end = start + batch.num_rows
        for entry in self._candidates(start, end):
            span = entry.digest.span
            low, high = max(span.start, start), min(span.end, end)
            entry.pieces.append(batch.slice(low - start, high - low))
            entry.rows += high - low
            if entry.rows == len(span):
                self._check(entry)

    def _feed_offsets(self, batch: pa.RecordBatch, offsets: pa.Array) -> None:
        values = offsets.to_numpy()
        low, high = int(values.min()), int(values.max()) + 1
        for entry in self._candidates(low, high):
            starts, ends = entry.bounds()
            at = np.searchsorted(starts, values, side="right") - 1
            inside = (at >= 0) & (values < ends[np.maximum(at, 0)])
            hits = int(np.count_nonzero(inside))
            if not hits:
                continue
            entry.pieces.append(batch.filter(pa.array(inside)))
            entry.rows += hits
            if entry.rows > entry.digest.rows:
                raise _Mismatch(
                    entry.digest.span,
                    f"the input holds {entry.rows} row(s) at offsets delivered as {entry.digest.rows} row(s)",
                )
            if entry.rows == entry.digest.rows:
                self._check(entry)

    def _check(self, entry: _Open) -> None:
        try:
            # Each record is checked with its own algorithm: a cache written by an earlier release
            # (another algorithm) is still verified after an upgrade, not skipped.
            actual = rows_digest(entry.pieces, self.offset_column, entry.digest.algorithm)
        except pa.ArrowInvalid as exc:  # the range's rows come from batches with other columns or types
            raise _Mismatch(entry.digest.span, f"their columns differ between input batches ({exc})") from exc
        entry.pieces = []  # the range is settled either way: free its rows
        entry.done = True
        self._remaining -= 1
        if actual != entry.digest.digest:
            raise _Mismatch(entry.digest.span, "their content differs from what was delivered there")
        self.verified += 1


def _effective(digests: Iterable[RangeDigest], where: str) -> list[RangeDigest]:
    """The digests to check: latest record wins; older ones it overlaps are superseded."""
    every = list(digests)
    usable = [d for d in every if d.algorithm in ALGORITHMS]
    foreign = len(every) - len(usable)
    if foreign:
        log.warning(
            "%s: %d content digest(s) of another algorithm (not one of %s) are not checked",
            where,
            foreign,
            ", ".join(ALGORITHMS),
        )
    return latest_records(usable)


def _minus(covered: tuple[OffsetRange, ...], vouched: tuple[OffsetRange, ...]) -> tuple[OffsetRange, ...]:
    """Positions of ``covered`` that no range of ``vouched`` includes."""
    out: list[OffsetRange] = []
    for span in covered:
        out.extend(
            intervals.gaps_between(intervals.clip(vouched, span.start, span.end), span.start, span.end)
        )
    return tuple(out)
