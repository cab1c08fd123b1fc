"""Issue 16 items 1 and 6 through ``dag.test()``: read-back of a ``replace`` ingest, the latest run's filter,
and an empty first write.

Two DAG runs for one logical date with ``write_mode="replace"``: the second run's read-back sensor verifies
its own rows (the ingest's XCom names the partition it wrote and the key it replaced), 0 duplicates. When the
replace's delete did not happen (fault-injected), the sensor must report the earlier run's rows still in
the table as duplicates (``INCOMPLETE``, then a sensor timeout), never "verified, 0 duplicates"; a reader
that filters on the ingest's ``source_tag`` (``write_modes.latest_run_filter``) reads the latest run once.

An empty source must still create the table (from the declared schema or the Parquet file's own), and the
sensor then succeeds with nothing to verify.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG

import zerobus_orchestration.runtime.facade as runtime_module
from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor
from tests.support.airflow_env import xcom
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.runtime.supersede import Supersession
from zerobus_orchestration.write_modes import latest_run_filter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

DAY = datetime(2026, 11, 1, tzinfo=UTC)


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _replace_dag(dag_id: str, table: str, path: Path, **sensor: Any) -> DAG:
    with DAG(dag_id, schedule=None) as dag:
        ingest = ZerobusIngestOperator(
            task_id="ingest", table=table, path=str(path), role="derived", write_mode="replace"
        )
        readback = ZerobusReadbackSensor(
            task_id="readback",
            table=table,
            ingest_task_id="ingest",
            poke_interval=0.1,
            max_poll_interval=0.3,
            **{"timeout": 60, **sensor},
        )
        ingest >> readback
    return dag


@dataclass(frozen=True)
class Run:
    run_id: str
    states: dict[str, str]
    xcoms: dict[str, Any]


def _run(dag: DAG, hours: int) -> Run:
    """A DAG run for ``DAY`` (a re-run of that day), read at once: ``dag.test()`` deletes the earlier run
    of the same logical date from the metadata DB (the run id differs by ``run_after``)."""
    run = dag.test(logical_date=DAY, run_after=DAY + timedelta(hours=hours))
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    return Run(
        run.run_id, states, {task: xcom(dag.dag_id, run.run_id, task, missing_ok=True) for task in states}
    )


def _run_twice(dag: DAG, path: Path) -> tuple[Run, Run]:
    """Two runs of the day, the second with corrected input (other order ids)."""
    first = _run(dag, 1)
    _orders(path, start=1_000)
    second = _run(dag, 2)
    assert first.run_id != second.run_id
    return first, second


def _tag_counts(table: str) -> dict[str, int]:
    hook = ZerobusHook()
    try:
        runtime = hook.get_conn()
        reader = table_truth.reader_for(runtime.catalog, runtime.config, table)
        assert reader is not None
        return table_truth.source_tag_counts(reader, prefix="")
    finally:
        hook.release()


def _orders(path: Path, n: int = 50, start: int = 0) -> Path:
    pq.write_table(pa.table({"order_id": pa.array(range(start, start + n), pa.int64())}), path)
    return path


def test_a_rerun_of_a_day_reads_back_its_own_rows_with_no_duplicates(
    register_dag: Any, tmp_path: Path
) -> None:
    table = "main.derived.replace_readback_ok"
    path = _orders(tmp_path / "orders.parquet")
    dag = _replace_dag("replace_readback_ok", table, path, deferrable=True)
    register_dag(dag)

    first, second = _run_twice(dag, path)

    assert first.states == second.states == {"ingest": "success", "readback": "success"}
    written = second.xcoms["ingest"]
    assert written["write_mode"] == "replace" and written["replace_key"] == "2026-11-01/-1"
    assert written["partition"] == f"2026-11-01/-1@{second.run_id}"
    assert written["source_tag"] == f"replace_readback_ok/ingest[{written['partition']}]"
    assert written["superseded_sources"] == [f"replace_readback_ok/ingest[2026-11-01/-1@{first.run_id}]"]
    verified = second.xcoms["readback"]
    assert verified["verified"] is True and verified["duplicate_count"] == 0
    assert verified["rows_scanned"] == 50 and verified["expected_from"] == "write_record"
    assert _tag_counts(table) == {written["source_tag"]: 50}


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferred"])
def test_a_replace_whose_delete_did_not_happen_reads_back_as_duplicates(
    register_dag: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    deferrable: bool,
) -> None:
    table = f"main.derived.replace_readback_kept_{'deferred' if deferrable else 'poke'}"
    dag_id = f"replace_kept_{'deferred' if deferrable else 'poke'}"
    path = _orders(tmp_path / "orders.parquet")
    dag = _replace_dag(dag_id, table, path, deferrable=deferrable, timeout=3)
    register_dag(dag)
    skipped: list[str] = []

    def no_delete(*_: Any, replace_key: str, **__: Any) -> Supersession:
        skipped.append(replace_key)  # the fault: the replace's delete never runs
        return Supersession(replace_key, ())

    monkeypatch.setattr(runtime_module, "supersede", no_delete)

    first, second = _run_twice(dag, path)

    assert skipped == ["2026-11-01/-1", "2026-11-01/-1"], "the fault must have acted on both runs"
    old_tag = f"{dag_id}/ingest[2026-11-01/-1@{first.run_id}]"
    new_tag = f"{dag_id}/ingest[2026-11-01/-1@{second.run_id}]"
    assert _tag_counts(table) == {old_tag: 50, new_tag: 50}, "both runs are in the table"
    # dag.test() prints the task logs (structlog) on stdout: the sensor's attempts and its failure. The
    # second run's read-back counts the first run's 50 rows as duplicates and never succeeds.
    incomplete = [line for line in capsys.readouterr().out.splitlines() if "still in the table" in line]
    assert incomplete, "the sensor must say which superseded run's rows are still in the table"
    assert all(old_tag in line and "50 row(s)" in line for line in incomplete), incomplete[-1]
    assert first.states == {"ingest": "success", "readback": "success"}  # its day held only its rows
    assert second.states == {"ingest": "success", "readback": "failed"}
    assert second.xcoms["readback"] is None
    written = second.xcoms["ingest"]
    assert written["source_tag"] == new_tag and written["superseded_sources"] == []

    # A reader that filters on the ingest's source_tag reads the latest complete run once (real Delta).
    from deltalake import DeltaTable, QueryBuilder

    hook = ZerobusHook()
    try:
        runtime = hook.get_conn()
        reader = table_truth.reader_for(runtime.catalog, runtime.config, table)
        assert reader is not None
        delta = DeltaTable(reader.uri)
    finally:
        hook.release()
    query = f"SELECT order_id, _twg_source FROM t WHERE {latest_run_filter(written['source_tag'])}"
    rows = pa.table(QueryBuilder().register("t", delta).execute(query).read_all())
    assert rows.num_rows == 50 and pc.unique(rows["_twg_source"]).to_pylist() == [written["source_tag"]]
    assert sorted(rows["order_id"].to_pylist()) == list(range(1_000, 1_050))
    both = pa.table(QueryBuilder().register("t", delta).execute("SELECT count(*) AS n FROM t").read_all())
    assert both["n"].to_pylist() == [100], "without the filter the day is read twice"

    # A sensor given the replace write's keys explicitly (no ingest_task_id) judges it the same way. Both
    # runs' rows are visible by now, so its first attempt (in the worker, before any deferral) already
    # finds the duplicates; the timeout only bounds how long it keeps failing.
    with DAG(f"{dag_id}_explicit", schedule=None) as explicit:
        ZerobusReadbackSensor(
            task_id="readback",
            table=table,
            source=written["source"],
            partition=written["partition"],
            replaces=written["replace_key"],
            poke_interval=0.1,
            max_poll_interval=0.3,
            timeout=1,
            deferrable=deferrable,
        )
    register_dag(explicit)
    capsys.readouterr()
    run = explicit.test(logical_date=DAY)
    assert _states(run) == {"readback": "failed"}
    said = [line for line in capsys.readouterr().out.splitlines() if "still in the table" in line]
    assert said and old_tag in said[-1], "explicit replaces= must count the other run's rows too"


def test_replaces_needs_the_write_keys_and_not_an_ingest_task() -> None:
    with pytest.raises(ValueError, match="needs the replace write's source and partition"):
        ZerobusReadbackSensor(task_id="r", table="main.d.t", replaces="2026-11-01/-1")
    with pytest.raises(ValueError, match="not both"):
        ZerobusReadbackSensor(task_id="r", table="main.d.t", ingest_task_id="ingest", replaces="k")


def _empty_dag(dag_id: str, table: str, path: Path, schema: dict[str, str] | None) -> DAG:
    with DAG(dag_id, schedule=None) as dag:
        ingest = ZerobusIngestOperator(task_id="ingest", table=table, path=str(path), schema=schema)
        readback = ZerobusReadbackSensor(
            task_id="readback", table=table, ingest_task_id="ingest", poke_interval=0.1, timeout=30
        )
        ingest >> readback
    return dag


@pytest.mark.parametrize("source", ["parquet", "csv_declared"])
def test_an_empty_first_write_creates_the_table_and_the_sensor_succeeds(
    register_dag: Any, tmp_path: Path, source: str
) -> None:
    table = f"main.raw.empty_first_{source}"
    if source == "parquet":  # an empty Parquet file still declares its schema
        path = tmp_path / "orders.parquet"
        empty = pa.table({"order_id": pa.array([], pa.int64()), "amount": pa.array([], pa.decimal128(18, 2))})
        pq.write_table(empty, path)
        schema = None
    else:  # a header-only CSV: the declared schema is the authority
        path = tmp_path / "orders.csv"
        path.write_text("order_id,amount\n")
        schema = {"order_id": "bigint", "amount": "decimal(18,2)"}
    dag = _empty_dag(f"empty_first_{source}", table, path, schema)
    register_dag(dag)

    run = dag.test()

    assert _states(run) == {"ingest": "success", "readback": "success"}
    written = xcom(dag.dag_id, run.run_id, "ingest")
    assert written["rows_written"] == 0 and written["delta_version"] is not None
    verified = xcom(dag.dag_id, run.run_id, "readback")
    assert verified["nothing_to_verify"] is True and verified["expected_rows"] == 0
    hook = ZerobusHook()
    try:
        runtime = hook.get_conn()
        live = runtime.catalog.describe(table)
        assert live is not None, "an empty first write must create the table"
        types = {f.name: f.type for f in live.arrow_schema()}
        assert types["order_id"] == pa.int64() and types["amount"] == pa.decimal128(18, 2)
        reader = table_truth.reader_for(runtime.catalog, runtime.config, table)
        assert reader is not None
        from deltalake import DeltaTable

        assert DeltaTable(reader.uri).to_pyarrow_table().num_rows == 0  # a downstream reader finds it empty
    finally:
        hook.release()
