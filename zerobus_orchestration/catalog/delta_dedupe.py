"""Keep one copy of each position held twice, through delta-rs, in one commit (``repair --dedupe``).

The rows at the positions are read through DataFusion with each position's copies numbered by
``_twg_emit_ts`` (the first-stamped copy is the one kept), and written back with
``write_deltalake(mode="overwrite", predicate=...)``: delta-rs removes every row the predicate matches
and adds the kept ones in the same commit, so no reader sees the positions missing or still doubled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.catalog.base import COPY_COLUMN, PositionsHeldTwice
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE

if TYPE_CHECKING:
    from deltalake import DeltaTable


def datafusion_predicate(positions: PositionsHeldTwice) -> str:
    """The positions as a DataFusion SQL predicate (double-quoted identifiers, '' escapes)."""
    if not positions.spans:
        raise ValueError("no positions given (the rewrite would change nothing)")
    return " OR ".join(
        f'("{SOURCE}" = \'{tag.replace(chr(39), chr(39) * 2)}\' AND "{OFFSET}" >= {span.start} '
        f'AND "{OFFSET}" < {span.end})'
        for tag, span in positions.spans
    )


def first_copies(table: DeltaTable, predicate: str) -> pa.Table:
    """The first-stamped copy of every row matching ``predicate``, in the table's own schema."""
    from deltalake import QueryBuilder

    query = (
        f'SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "{SOURCE}", "{OFFSET}" '
        f'ORDER BY "{EMIT_TS}") AS "{COPY_COLUMN}" FROM raw WHERE {predicate}) WHERE "{COPY_COLUMN}" = 1'
    )
    rows = pa.table(QueryBuilder().register("raw", table).execute(query).read_all())
    schema = pa.schema(table.schema().to_arrow())
    kept = rows.drop_columns([COPY_COLUMN])
    # DataFusion answers with view types; the table's own types go back in (same values).
    return pa.table([pc.cast(kept.column(f.name), f.type) for f in schema], schema=schema)


def keep_one_copy(
    table: DeltaTable, positions: PositionsHeldTwice, storage_options: dict[str, str] | None
) -> None:
    """Replace the rows at ``positions`` by one copy each, in one commit (raises delta-rs's errors,
    ``CommitFailedError`` when a concurrent commit won: the caller re-reads and retries)."""
    from deltalake import write_deltalake

    predicate = datafusion_predicate(positions)
    kept = first_copies(table, predicate)
    write_deltalake(table, kept, mode="overwrite", predicate=predicate, storage_options=storage_options)
