"""The read-back verdict as a typed, JSON-safe value that every adapter branches on.

One attempt at verifying coverage against the table ends in exactly one ``ReadbackStatus``:

- ``NOT_VISIBLE_YET``: Iceberg has not caught up with the Delta version the writer saw (or the table is
  not there yet). Wait.
- ``INCOMPLETE``: the snapshot is visible but covered rows are missing from it, and the table's Delta log
  shows them in no version up to the one the snapshot reflects. Zerobus commits acknowledged rows
  asynchronously (time to table, P95 <= 30 s), so they may still be on their way: wait until the
  caller's deadline, then report the gap (the outcome carries the report with the missing ranges).
- ``LOST``: covered rows are missing from a snapshot that reflects Delta version ``S`` (its summary's
  ``delta-version``; in production Unity Catalog's ``converted_delta_version``), and the Delta log shows
  why no later snapshot brings them back: Delta holds them at ``S`` (the Iceberg side lacks them), or a
  row-removal commit (``DELETE``, ``MERGE``, ``UPDATE``, ``RESTORE``, ``TRUNCATE``) took them after
  delivery, named in the message and ``lost_ranges``. Decided the same way embedded, against
  ``zerobus-orch serve`` and in production, on the first snapshot that shows it (one mirror cycle), not at
  the deadline. Alert; docs/runbook.md says what to do.
- ``DUPLICATED``: every covered row is there, some more than once (at-least-once re-sends after a
  reconnect or a crash). Not verified: the report carries the count and a sample;
  ``zerobus-orch repair --dedupe`` removes the extra copies (docs/runbook.md).
- ``UNAVAILABLE``: the read failed in a way a retry can fix (network, timeout, service busy). Wait.
- ``VERIFIED``: every covered range is in the table.
- ``NOTHING_TO_VERIFY``: no delivered coverage for the key. Waiting cannot create coverage; only the
  caller can tell an empty write (fine) from a wrong table, source or partition (a fault).
- ``FAILED``: a problem a wait will not fix (configuration, credentials, a table not written by the sink).

This module imports nothing heavy (no pyarrow, no pyiceberg): an Airflow DAG file and the triggerer
import it to read a trigger event back with ``ReadbackOutcome.from_json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ReadbackStatus(StrEnum):
    NOT_VISIBLE_YET = "not_visible_yet"
    INCOMPLETE = "incomplete"
    UNAVAILABLE = "unavailable"
    VERIFIED = "verified"
    NOTHING_TO_VERIFY = "nothing_to_verify"
    FAILED = "failed"
    LOST = "lost"
    DUPLICATED = "duplicated"

    @property
    def is_terminal(self) -> bool:
        """True when another attempt cannot change the verdict (stop polling)."""
        return self in _TERMINAL

    @property
    def is_successful(self) -> bool:
        """True only for ``VERIFIED``; ``NOTHING_TO_VERIFY`` is the caller's call (empty write or fault)."""
        return self is ReadbackStatus.VERIFIED


_TERMINAL = frozenset(
    {
        ReadbackStatus.VERIFIED,
        ReadbackStatus.NOTHING_TO_VERIFY,
        ReadbackStatus.FAILED,
        ReadbackStatus.LOST,
        ReadbackStatus.DUPLICATED,
    }
)


@dataclass(frozen=True)
class ReadbackOutcome:
    """One judged attempt: the status, a one-line message naming the table, and the report if one ran.

    ``report`` is ``ReadbackReport.as_dict()`` (primitives only) when Iceberg was scanned, so the outcome
    survives ``to_json()`` / ``from_json()`` unchanged, e.g. through an Airflow trigger event.
    """

    status: ReadbackStatus
    table: str
    message: str
    report: Mapping[str, Any] | None = field(default=None)

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    @property
    def verified(self) -> bool:
        """True only for ``VERIFIED``: every delivered row is there, once."""
        return self.status.is_successful

    @property
    def rows_scanned(self) -> int:
        """Rows the Iceberg scan returned (0 when no scan ran)."""
        return int((self.report or {}).get("rows_scanned") or 0)

    @property
    def missing_ranges(self) -> list[dict[str, Any]]:
        """Covered ranges the scan did not show (``sink``, ``source``, ``partition``, ``start``, ``end``)."""
        ranges = (self.report or {}).get("missing_ranges")
        return list(ranges) if isinstance(ranges, list) else []

    @property
    def missing_rows(self) -> int:
        return sum(int(m["end"]) - int(m["start"]) for m in self.missing_ranges)

    @property
    def lost_ranges(self) -> list[dict[str, Any]]:
        """Missing ranges judged lost (``LOST``), each with its ``cause`` (``deleted``: by the commit at
        ``removed_at_version`` with ``operation``; ``not_in_iceberg``: Delta holds them)."""
        ranges = (self.report or {}).get("lost_ranges")
        return list(ranges) if isinstance(ranges, list) else []

    @property
    def lost_rows(self) -> int:
        return sum(int(m["end"]) - int(m["start"]) for m in self.lost_ranges)

    @property
    def duplicate_count(self) -> int:
        """Extra copies of delivered rows in the table (0 when every row is there once)."""
        return int((self.report or {}).get("duplicate_count") or 0)

    @property
    def duplicate_sample(self) -> list[dict[str, Any]]:
        """Some duplicated rows (``source``, ``partition``, ``offset``, ``count``)."""
        sample = (self.report or {}).get("duplicate_sample")
        return list(sample) if isinstance(sample, list) else []

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "table": self.table,
            "message": self.message,
            "report": None if self.report is None else dict(self.report),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReadbackOutcome:
        report = data.get("report")
        return cls(
            status=ReadbackStatus(str(data["status"])),
            table=str(data["table"]),
            message=str(data.get("message", "")),
            report=dict(report) if isinstance(report, Mapping) else None,
        )
