"""One run's rows as the table holds them, a range of positions at a time: what a re-run is compared with.

A re-run of a logical partition is a no-op when its input holds the rows an earlier run delivered
(docs/adr/0007-write-modes.md). The coverage cache knows only this host's runs; the table knows every
host's, so the comparison reads the earlier run's rows from the table itself: the rows whose
``_twg_source`` is the run's tag, at one Delta version (a re-read sees the same snapshot), files pruned by
the tag, ordered by ``_twg_offset``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.coverage.table_truth import TableReader, TableTruthError
from zerobus_orchestration.reserved import OFFSET, SOURCE, is_reserved
from zerobus_orchestration.storage import reveal

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable


class RunRows:
    """The rows of run ``tag`` in ``reader``'s table at ``version`` (the latest when None)."""

    def __init__(self, reader: TableReader, tag: str, version: int | None = None) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        self.reader = reader
        self.tag = tag
        try:
            self._table: DeltaTable = DeltaTable(
                reader.uri, version=version, storage_options=reveal(reader.storage_options) or None
            )
        except (DeltaError, OSError) as exc:
            raise TableTruthError(
                f"table {reader.table}: cannot read the Delta log at {reader.uri}: {exc}"
            ) from exc
        self.version = self._table.version()
        self._dataset: ds.Dataset | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The table's payload columns (the reserved ``_twg_*`` ones left out)."""
        return tuple(name for name in self._table.schema().to_arrow().names if not is_reserved(name))

    def between(self, start: int, end: int, columns: Sequence[str]) -> pa.Table:
        """``columns`` and ``_twg_offset`` of the run's rows at positions ``[start, end)``, by position."""
        import pyarrow.dataset as ds

        wanted = [*columns, OFFSET]
        where = (ds.field(SOURCE) == self.tag) & (ds.field(OFFSET) >= start) & (ds.field(OFFSET) < end)
        try:
            rows = self._scan().to_table(columns=wanted, filter=where)
        except pa.ArrowException as exc:
            raise TableTruthError(f"table {self.reader.table}: cannot read run {self.tag!r}: {exc}") from exc
        return rows.take(pc.sort_indices(rows[OFFSET]))

    def _scan(self) -> ds.Dataset:
        from deltalake.exceptions import DeltaProtocolError

        if self._dataset is None:
            try:
                self._dataset = self._table.to_pyarrow_dataset(
                    file_pruning_predicate=[(SOURCE, "=", self.tag)]
                )
            except DeltaProtocolError:
                # Deletion vectors or column mapping: DataFusion reads what pyarrow datasets cannot.
                self._dataset = _via_datafusion(self._table, self.tag)
        return self._dataset


def _via_datafusion(table: DeltaTable, tag: str) -> ds.Dataset:
    import pyarrow.dataset as ds
    from deltalake import QueryBuilder

    literal = "'" + tag.replace("'", "''") + "'"
    rows = (
        QueryBuilder()
        .register("t", table)
        .execute(f'SELECT * FROM t WHERE "{SOURCE}" = {literal}')
        .read_all()
    )
    return ds.dataset(pa.table(rows))
