"""Coverage identity shared by the sink (which confirms ranges) and the coverage store (which keeps them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, order=True)
class CoverageKey:
    """Which write a range belongs to: the sink id, the source, and the partition (``""`` if none)."""

    sink: str
    source: str
    partition: str = ""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Half-open row-position range ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range [{self.start}, {self.end})")

    def __len__(self) -> int:
        return self.end - self.start


class CoverageRecorder(Protocol):
    """Where the ack lane records durably delivered ranges. Implemented by ``coverage.store.CoverageStore``.

    The ack lane records a whole burst with one ``record_many`` call (one store transaction), in
    offset order; ``record`` is the single-range form.
    """

    def record(self, key: CoverageKey, span: OffsetRange) -> None: ...

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None: ...
