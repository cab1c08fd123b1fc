"""A table wider than Delta's statistics budget keeps the statistics resume and read-back prune by.

Delta writers keep file statistics of the first 32 leaf columns only, and the reserved columns come
last: the catalog names them in ``delta.dataSkippingStatsColumns`` when the table is created, so every
file of a wide table still carries ``_twg_source`` and ``_twg_emit_ts`` bounds (the official SDK, the
embedded emulator, real Delta).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.catalog.base import STATS_COLUMNS
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime

pytestmark = pytest.mark.integration


def _wide(columns: int, rows: int = 50) -> pa.Table:
    return pa.table({f"c{i:02d}": pa.array(range(i, i + rows), pa.int64()) for i in range(columns)})


def _file_stats(uri: str) -> list[dict[str, object]]:
    found = []
    for log in sorted(Path(uri, "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action and action["add"].get("stats"):
                found.append(json.loads(action["add"]["stats"]))
    return found


def _uri(rt: ZerobusRuntime, table: str) -> str:
    reader = table_truth.reader_for(rt.catalog, rt.config, table)
    assert reader is not None
    return reader.uri


def test_a_wide_table_keeps_statistics_of_its_reserved_columns(runtime: ZerobusRuntime) -> None:
    table = "main.raw.wide"
    runtime.write(table, _wide(40), source="wide")
    uri = _uri(runtime, table)
    named = DeltaTable(uri).metadata().configuration[STATS_COLUMNS].split(",")
    # The payload columns the default would have covered, then the reserved ones.
    assert named == [f"c{i:02d}" for i in range(29)] + [EMIT_TS, SOURCE, OFFSET]
    stats = _file_stats(uri)
    assert stats, "the write left no file with statistics"
    for file_stats in stats:
        assert {SOURCE, EMIT_TS, OFFSET} <= set(file_stats["minValues"])  # type: ignore[arg-type]


def test_a_narrow_table_keeps_delta_s_default(runtime: ZerobusRuntime) -> None:
    table = "main.raw.narrow"
    runtime.write(table, _wide(5), source="narrow")
    uri = _uri(runtime, table)
    assert STATS_COLUMNS not in DeltaTable(uri).metadata().configuration
    assert all({SOURCE, EMIT_TS} <= set(s["minValues"]) for s in _file_stats(uri))  # type: ignore[arg-type]
