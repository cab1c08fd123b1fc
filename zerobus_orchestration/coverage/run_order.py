"""The order of the runs of one logical partition, read from the table's own Delta log.

Two ``replace`` runs of a partition may write at once, on different hosts; each must agree with the
other on which one is newer, with nothing shared but the table (docs/adr/0007-write-modes.md). The
order is the Delta version at which a run's rows became visible: its *birth*, the first version whose
snapshot holds a row of its ``_twg_source`` tag. The table assigns it, every host reads the same log,
and time travel (``DeltaTable(uri, version=v)``) answers "which of the partition's tags are present at
``v``" exactly, whatever the files' statistics say. Two runs born in the same commit are ordered by
their tags (the greater tag is the newer), so ties are impossible to disagree on.

Rows of a tag only appear through appends and only disappear through a commit that removes rows
(``DELETE``, ``MERGE``, ``UPDATE``, ``RESTORE``, ``TRUNCATE``): between two such commits a tag's presence
can only go from absent to present, so a binary search over versions finds the birth. A removal that
took rows of a tag (fewer of its rows after the commit than before) is how a run learns that a newer run
deleted its rows while it was still writing, and the version before a removal is where another run looks
for rows of a run that was there before (``RunHistory.older``). The removals are found by the
operation names of the log's commit infos (``table_truth.row_removals``, which read-back's lost verdict
reads too), and judged by the rows themselves, not by the predicate text a commit recorded (delta-rs and
Databricks record it differently).

Reads go through the Delta log and the ``_twg_source`` column only; files whose statistics exclude the
partition's tag prefix are pruned. A table whose protocol pyarrow datasets cannot read (deletion
vectors, column mapping) is read through deltalake's DataFusion engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.coverage.table_truth import TableReader, TableTruthError, row_removals
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.storage import reveal
from zerobus_orchestration.write_modes import PartitionRun

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

ABSENT = -1
"""The version "before the table": no tag is present there."""


class RunHistory:
    """The runs of ``source``'s logical partition ``key`` in one table, across its Delta versions.

    Presence per version is read once and cached; a ``RunHistory`` belongs to one decision (a replace's
    supersede step), so a later change of the table is seen by a new one.
    """

    def __init__(self, reader: TableReader, *, source: str, key: str, latest: int | None = None) -> None:
        """``latest``: the version to take as the table's latest, when the caller has just read it."""
        self.reader = reader
        self.source = source
        self.key = key
        # Every tag of the partition starts with "source[key" (``write_modes.source_tag``); the tags of
        # another partition with the same beginning ("key0") are filtered out by parsing.
        self._prefix = source if key == "" else f"{source}[{key}"
        self._counts: dict[int, Mapping[str, int]] = {ABSENT: {}}
        self._latest = latest
        self._removals: tuple[int, ...] | None = None
        self._removals_from: int | None = None

    # -- the table now ---------------------------------------------------------------------------

    def latest(self) -> int:
        """The table's latest version (read once per ``RunHistory``)."""
        if self._latest is None:
            self._latest = self._load(None).version()
        return self._latest

    def live(self) -> frozenset[str]:
        """The partition's tags present in the latest version."""
        return self.present_at(self.latest())

    # -- the table at a version ------------------------------------------------------------------

    def rows_at(self, version: int) -> Mapping[str, int]:
        """Rows per tag of the partition in the snapshot of ``version`` (read once, then cached)."""
        found = self._counts.get(max(version, ABSENT))
        if found is None:
            found = self._tag_counts(version)
            self._counts[version] = found
        return found

    def present_at(self, version: int) -> frozenset[str]:
        """The partition's tags with at least one row in the snapshot of ``version``."""
        return frozenset(self.rows_at(version))

    def removals_since(self, version: int) -> tuple[int, ...]:
        """Versions of the row-removing commits after ``version`` (exclusive), oldest first."""
        latest = self.latest()
        if self._removals is None or self._removals_from is None or version < self._removals_from:
            found = row_removals(self.reader, after=version)
            self._removals = tuple(removal.version for removal in found.commits)
            self._removals_from = version
        return tuple(v for v in self._removals if version < v <= latest)

    # -- births and order ------------------------------------------------------------------------

    def birth(self, tag: str, *, hi: int, lo: int = ABSENT) -> int:
        """The first version in ``(lo, hi]`` whose snapshot holds ``tag``, which ``hi``'s does.

        ``lo``: a version known not to hold it (the table before this run sent anything), or ``ABSENT``.
        The search assumes no removal of ``tag`` in the window; ``deleted_since`` tells first whether one
        happened.
        """
        if tag not in self.present_at(hi):
            raise TableTruthError(f"table {self.reader.table}: run {tag!r} has no row at version {hi}")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if tag in self.present_at(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def deleted_since(self, tag: str, version: int) -> int | None:
        """The version of the first commit after ``version`` that took rows of ``tag`` away."""
        for removal in self.removals_since(version):
            before = self.rows_at(removal - 1).get(tag, 0)
            if before and self.rows_at(removal).get(tag, 0) < before:
                return removal
        return None

    def older(self, other: str, *, than: str, born: int, since: int) -> bool:
        """Whether run ``other`` is older than run ``than``, born at version ``born``.

        Older: ``other`` had rows before ``born`` (at ``born - 1``, or just before a removal after
        ``since``, the only places its presence can have ended: a run deleted while still writing,
        whose later rows landed after the removal, is still the older one), or it was born in the same
        commit and its tag sorts first. Every host answers this the same way for the same pair, from the
        same log.
        """
        if other in self.present_at(born - 1):
            return True
        for removal in self.removals_since(since):
            if removal > born:
                break
            if other in self.present_at(removal - 1):
                return True
        return other in self.present_at(born) and other < than

    def newest(self, tags: Iterable[str], *, after: int) -> str:
        """The newest of ``tags`` (all present now, all born after version ``after``), by birth then tag."""
        latest = self.latest()
        ranked = sorted(tags, key=lambda tag: (self.birth(tag, hi=latest, lo=after), tag))
        if not ranked:
            raise ValueError("newest() needs at least one tag")
        return ranked[-1]

    # -- reading ---------------------------------------------------------------------------------

    def _load(self, version: int | None) -> DeltaTable:
        from deltalake import DeltaTable

        try:
            return DeltaTable(
                self.reader.uri, version=version, storage_options=reveal(self.reader.storage_options) or None
            )
        except Exception as exc:  # deltalake raises its own exception types, OSError, ValueError
            at = "" if version is None else f" at version {version}"
            raise TableTruthError(
                f"table {self.reader.table}: cannot read the Delta log{at} at {self.reader.uri}: {exc}"
            ) from exc

    def _tag_counts(self, version: int) -> Mapping[str, int]:
        """Rows per tag of this partition in the snapshot of ``version``."""
        import pyarrow.dataset as ds  # loads pandas (~0.4 s): only a table read pays for it
        from deltalake.exceptions import DeltaError, DeltaProtocolError

        table = self._load(version)
        upper = self._prefix[:-1] + chr(ord(self._prefix[-1]) + 1)
        try:
            try:
                dataset = table.to_pyarrow_dataset(
                    file_pruning_predicate=[(SOURCE, ">=", self._prefix), (SOURCE, "<", upper)]
                )
            except DeltaProtocolError:
                tags = _tags_via_datafusion(table, self._prefix)
            else:
                wanted = pc.starts_with(ds.field(SOURCE), pattern=self._prefix)
                tags = dataset.to_table(columns=[SOURCE], filter=wanted).column(SOURCE)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            where = f"table {self.reader.table}"
            raise TableTruthError(
                f"{where}: cannot read {SOURCE} at version {version} of {self.reader.uri}: {exc}"
            ) from exc
        values = tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags
        counts: dict[str, int] = {}
        for entry in pc.value_counts(values).to_pylist():
            tag = entry["values"]
            if tag is not None and self._ours(str(tag)):
                counts[str(tag)] = int(entry["counts"])
        return counts

    def _ours(self, tag: str) -> bool:
        run = PartitionRun.of_tag(tag, self.source)
        return run is not None and run.key == self.key


def _tags_via_datafusion(table: DeltaTable, prefix: str) -> pa.Array:
    from deltalake import QueryBuilder

    literal = "'" + prefix.replace("'", "''") + "'"
    query = f'SELECT "{SOURCE}" FROM t WHERE starts_with("{SOURCE}", {literal})'
    rows = QueryBuilder().register("t", table).execute(query).read_all()
    if rows.num_rows == 0:
        return pa.array([], pa.string())
    return rows.column(SOURCE).combine_chunks()
