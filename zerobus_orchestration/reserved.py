"""Engine-owned columns stamped on every row the sink writes.

``_twg_emit_ts``: when the sink stamped the batch (UTC). ``_twg_source``: the write's source id
(asset key, ``dag_id/task_id``, ...). ``_twg_offset``: the row's position within (source, partition),
which is what coverage ranges count.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

EMIT_TS: Final = "_twg_emit_ts"
SOURCE: Final = "_twg_source"
OFFSET: Final = "_twg_offset"
RESERVED_NAMES: Final = (EMIT_TS, SOURCE, OFFSET)

RESERVED_FIELDS: Final = (
    pa.field(EMIT_TS, pa.timestamp("us", tz="UTC"), nullable=True),
    pa.field(SOURCE, pa.string(), nullable=True),
    pa.field(OFFSET, pa.int64(), nullable=True),
)

# Built-in column descriptions (catalog comments) for the engine-owned columns.
RESERVED_DESCRIPTIONS: Final = {
    EMIT_TS: "Time (UTC) at which zerobus-orchestration stamped and submitted the row's batch.",
    SOURCE: "Source of the write that produced the row (asset key, dag_id/task_id, or a declared source).",
    OFFSET: "Row position within (source, partition); coverage ranges are counted in these positions.",
}


def is_reserved(name: str) -> bool:
    return name in RESERVED_NAMES


def reserved_case_twin(name: str) -> str | None:
    """The reserved name ``name`` equals in another case (``_TWG_OFFSET`` -> ``_twg_offset``), else None.

    Delta and Unity Catalog match column names case-insensitively, so such a payload column would be the
    same column as the engine-owned one.
    """
    if is_reserved(name):
        return None
    return next((r for r in RESERVED_NAMES if r.lower() == name.lower()), None)
