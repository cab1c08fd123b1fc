"""Lost, not late: delivered rows a snapshot lacks that no later snapshot can bring.

Read-back knows which Delta version the scanned Iceberg snapshot reflects (its summary's
``delta-version``, or Unity Catalog's ``converted_delta_version``), not why a delivered row is missing
from it. The table's own Delta log knows: a ``MissingExplainer`` (the runtime's reads it,
``coverage/absence.py``) says which missing ranges are lost, held by Delta at that version yet absent
from its snapshot, or taken by a row-removal commit after they were delivered; the rest were never
committed yet and are waited for. The rule is the same in every mode: embedded, against
``zerobus-orch serve`` and in production.

Light on purpose (no pyarrow, no pyiceberg): verdict texts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from zerobus_orchestration.ranges import CoverageKey, OffsetRange

if TYPE_CHECKING:
    from zerobus_orchestration.readback.coverage_check import MissingRange

RUNBOOK = "docs/runbook.md, 'Read-back verdicts: lost, duplicated'"


class LostCause(StrEnum):
    DELETED = "deleted"
    """A row-removal commit (DELETE, MERGE, UPDATE, RESTORE, TRUNCATE) took them after delivery."""
    NOT_IN_ICEBERG = "not_in_iceberg"
    """Delta holds them at the version the snapshot reflects; the snapshot lacks them."""


@dataclass(frozen=True)
class LostRange:
    """Delivered positions ``span`` of ``key`` that are lost, why, and (deleted) by which commit."""

    key: CoverageKey
    span: OffsetRange
    cause: LostCause
    removed_at: int | None = None  # the Delta version of the commit that took them
    operation: str | None = None  # that commit's operation

    def as_dict(self) -> dict[str, Any]:
        return {
            "sink": self.key.sink,
            "source": self.key.source,
            "partition": self.key.partition,
            "start": self.span.start,
            "end": self.span.end,
            "cause": self.cause.value,
            "removed_at_version": self.removed_at,
            "operation": self.operation,
        }

    def describe(self, reflects: int) -> str:
        where = f"source {self.key.source!r} positions {self.span.start}..{self.span.end - 1}"
        if self.cause is LostCause.DELETED:
            return f"{where} deleted by Delta version {self.removed_at} ({self.operation})"
        return f"{where} held by Delta version {reflects}, absent from its Iceberg snapshot"


class MissingExplainer(Protocol):
    """Which of ``missing`` (ranges a snapshot reflecting Delta version ``reflects`` lacks) are lost;
    the ranges not returned are not committed yet (late)."""

    def __call__(self, missing: Sequence[MissingRange], reflects: int) -> Sequence[LostRange]: ...


def lost_message(table: str, lost: Sequence[LostRange], reflects: int) -> str:
    """The verdict's line: how many rows, which ranges and what removed them, and what to do."""
    rows = sum(len(r.span) for r in lost)
    shown = "; ".join(r.describe(reflects) for r in lost[:3])
    more = f"; and {len(lost) - 3} more range(s)" if len(lost) > 3 else ""
    # A tag is ``source[partition]`` (``write_modes.source_tag``); a source never holds ``[``.
    sources = sorted({r.key.source.split("[", 1)[0] for r in lost})
    dedupe = f"zerobus-orch repair --dedupe --table {table}" + (
        f" --source {sources[0]!r}" if len(sources) == 1 else ""
    )
    return (
        f"{table}: {rows} delivered row(s) in {len(lost)} range(s) are LOST, not late: {shown}{more} "
        f"(the Iceberg snapshot reflects Delta version {reflects}; no later snapshot brings them back). "
        f"See {RUNBOOK}: find who removed them in the table's history; to deliver them again, re-run the "
        f"write with resume off (--no-resume, resume=False: a plain re-run skips what its coverage says "
        f"was delivered), then {dedupe}"
    )
