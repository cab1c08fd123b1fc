"""The glob retry that lost a file's rows: ``[b, c]`` was delivered; a new ``a`` lands, sorting first,
and the task instance runs again. The retry must refuse (positions 0.. now hold ``a``'s rows), not skip
``a`` as delivered and send ``b`` again. Before that, a corrupt ``c`` refuses the first try whole: the
input is checked before its first row is sent, so nothing of ``b`` goes out ahead of the bad file.
Runs the operator against the embedded emulator through the official SDK, like
tests/system/airflow/test_operators.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.ingest import ZerobusIngestOperator
from zerobus_orchestration.ranges import CoverageKey
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID, source_tag

pytestmark = pytest.mark.integration

TABLE = "main.raw.glob_integrity"


def _orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": [f"c{i % 7}" for i in range(start, start + n)],
            "amount": [round(i * 1.25, 2) for i in range(start, start + n)],
        }
    )


def _context(run_id: str) -> Any:
    return {"run_id": run_id, "ti": SimpleNamespace(map_index=-1, run_id=run_id)}


@pytest.fixture
def hook() -> Iterator[ZerobusHook]:
    h = ZerobusHook()
    yield h
    h.release()


def test_a_glob_retry_after_a_new_file_sorted_first_refuses_instead_of_losing_it(
    tmp_path: Path, hook: ZerobusHook
) -> None:
    pq.write_table(_orders(1_000, 250), tmp_path / "b.parquet")
    (tmp_path / "c.parquet").write_bytes(b"PAR1 this is not a parquet file")
    with DAG("glob_integrity", schedule=None):
        op = ZerobusIngestOperator(
            task_id="ingest", table=TABLE, path=str(tmp_path / "*.parquet"), batch_rows=100
        )

    runtime = hook.get_conn()
    key = CoverageKey(
        DEFAULT_SINK_ID, source_tag("glob_integrity/ingest", "manual__glob/-1"), "manual__glob/-1"
    )

    # Try 1: c cannot be read. The whole input is checked before its first row, so b is not sent either.
    with pytest.raises(AirflowFailException, match=r"(?i)parquet") as refused:
        op.execute(_context("manual__glob"))
    assert str(tmp_path / "c.parquet") in str(refused.value)
    assert "Nothing of this write was sent" in str(refused.value)
    runtime.flush()
    assert runtime.coverage(TABLE).ranges(key) == ()  # nothing of b recorded as delivered

    # Try 2: the operator fixes c; the same task instance sends all of b and c.
    pq.write_table(_orders(2_000, 50), tmp_path / "c.parquet")
    sent = op.execute(_context("manual__glob"))
    assert (sent["rows_written"], sent["rows_skipped"]) == (300, 0)
    runtime.flush()
    store = runtime.coverage(TABLE)
    before = (store.ranges(key), store.digests(key))
    assert sum(len(r) for r in before[0]) == 300  # b then c, positions 0 .. 300

    pq.write_table(_orders(0, 120), tmp_path / "a.parquet")  # a new file lands, sorting first
    with pytest.raises(AirflowFailException) as failure:
        op.execute(_context("manual__glob"))  # try 3: same task instance, resumes by position
    message = str(failure.value)
    for part in (TABLE, "glob_integrity/ingest", "[0, 100)", "Nothing was sent"):
        assert part in message
    assert "ZerobusIngestOperator(resume=False)" in message and "new partition" in message
    assert (store.ranges(key), store.digests(key)) == before
    report = runtime.verify(TABLE, source="glob_integrity/ingest", partition="manual__glob/-1", wait_s=15)
    assert report.verified and report.rows_scanned == 300 and report.duplicate_count == 0
    landed = runtime.read_rows(TABLE, source="glob_integrity/ingest", partition="manual__glob/-1")
    # b and c once each, nothing of a
    assert sorted(landed.column("order_id").to_pylist()) == [*range(1_000, 1_250), *range(2_000, 2_050)]

    # A new run writes under its own coverage partition: every file, a's rows included.
    fresh = op.execute(_context("manual__glob_next"))
    assert (fresh["rows_written"], fresh["rows_skipped"]) == (420, 0)
