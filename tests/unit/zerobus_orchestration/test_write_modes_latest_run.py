"""``write_modes.latest_run_filter``: the predicate a reader uses to read only the latest complete run.

Checked against a real Delta table (deltalake's DataFusion engine) holding two runs of one partition;
the Airflow end-to-end use is in tests/system/airflow/test_airflow_replace_readback.py.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.write_modes import latest_run_filter

OLD = "d/ingest[2026-11-01/-1@manual__2026-11-01T01:00:00+00:00]"
NEW = "d/ingest[2026-11-01/-1@manual__2026-11-01T02:00:00+00:00]"


def test_the_filter_reads_one_run_of_a_partition_that_holds_two(tmp_path: Path) -> None:
    rows = pa.table({"order_id": [1, 2, 3, 1, 2, 3], SOURCE: [OLD] * 3 + [NEW] * 3})
    write_deltalake(str(tmp_path), rows)
    table = DeltaTable(str(tmp_path))

    def count(where: str) -> int:
        result = pa.table(
            QueryBuilder().register("t", table).execute(f"SELECT * FROM t WHERE {where}").read_all()
        )
        assert set(result[SOURCE].to_pylist()) <= {NEW, OLD}
        return result.num_rows

    assert count(latest_run_filter(NEW)) == 3
    assert count(latest_run_filter(NEW, OLD)) == 6  # a mapped ingest: one tag per map index
    assert latest_run_filter(NEW) == f"{SOURCE} IN ('{NEW}')"


@pytest.mark.parametrize("tag", ["", "d/ingest[it's@r]", "d/ingest[a\\b@r]", "d/ingest[a\nb@r]"])
def test_a_tag_a_sql_literal_would_need_escaping_for_is_refused(tag: str) -> None:
    with pytest.raises(ConfigError, match="source_tag as recorded"):
        latest_run_filter(tag)


def test_no_tag_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        latest_run_filter()
