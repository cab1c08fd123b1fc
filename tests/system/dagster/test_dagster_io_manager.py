"""ZerobusIOManager against the embedded emulator: runs of a partition, read-back, partitions, frames, bad input."""

import datetime as dt
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_defs import ZerobusIOManager, ZerobusResource, build_contract_asset, coverage_keys
from tests.support.dagster_reexec_job import FAIL_AFTER, ROWS
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.runtime.facade import ZerobusRuntime

REPO = Path(__file__).resolve().parents[3]  # step processes import ``tests.support.*`` from here

EVENTS_KEY = dg.AssetKey(["raw", "events"])
EVENTS_SCHEMA = pa.schema([pa.field("event_id", pa.int64(), nullable=False), ("kind", pa.string())])
events_contract = build_contract_asset(
    EVENTS_KEY, schema=EVENTS_SCHEMA, descriptions={"event_id": "Event number."}
)


def events_table(n: int) -> pa.Table:
    return pa.table({"event_id": pa.array(range(n), pa.int64()), "kind": [f"k{i % 3}" for i in range(n)]})


@dg.asset(
    key=EVENTS_KEY,
    deps=[events_contract.key],
    metadata={
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn("kind", "STRING", "Event kind.")])
    },
)
def events() -> pa.Table:
    return events_table(500)


def _payload(table: pa.Table) -> pa.Table:
    return table.select([n for n in table.column_names if not n.startswith("_twg_")])


def read_all(zerobus: ZerobusResource, table: str, source: str) -> pa.Table:
    rt = zerobus.runtime
    report = rt.verify(table, source=source)
    assert report.verified, report.to_json()
    return rt.read_rows(table)


def test_materialize_twice_with_the_same_output_sends_nothing_the_second_time(
    zerobus: ZerobusResource, resources: dict
) -> None:
    """Before the partition lifecycle, the second run appended a second copy: 1,000 rows where 500 belong."""
    runs = []
    for _ in range(2):
        result = dg.materialize([*events_contract.definitions, events], resources=resources)
        assert result.success
        runs.append(result)
    rt = zerobus.runtime
    first, second = runs
    assert rt.covered("main.raw.events", source="raw/events", partition=f"@{first.run_id}") == (
        OffsetRange(0, 500),
    )
    assert rt.covered("main.raw.events", source="raw/events", partition=f"@{second.run_id}") == ()
    for result in runs:
        meta = result.asset_materializations_for_node("raw__events")[0].metadata
        assert meta["dagster/row_count"].value == 500
        assert meta["dagster/table_name"].value == "main.raw.events"
        assert meta["dagster/uri"].value.endswith("main/raw/events")
        assert meta["zerobus/source_tag"].value == f"raw/events[@{first.run_id}]", "where the rows are"
        assert meta["zerobus/logical_partition"].value == ""
        columns = {c.name: c.description for c in meta["dagster/column_schema"].schema.columns}
        # The asset's own description and the contract's (which wins where both describe a column).
        assert columns == {"event_id": "Event number.", "kind": "Event kind."}
    written = first.asset_materializations_for_node("raw__events")[0].metadata
    assert (
        written["zerobus/rows_written"].value == 500 and written["zerobus/already_delivered"].value is False
    )
    assert written["zerobus/streams_used"].value >= 1
    assert written["zerobus/delivery_latency_p99_s"].value >= written["zerobus/delivery_latency_p50_s"].value
    again = second.asset_materializations_for_node("raw__events")[0].metadata
    assert again["zerobus/already_delivered"].value is True
    assert again["zerobus/delivered_by"].value == f"raw/events[@{first.run_id}]"
    assert (again["zerobus/rows_written"].value, again["zerobus/rows_skipped"].value) == (0, 500)
    back = read_all(zerobus, "main.raw.events", "raw/events")
    assert back.num_rows == 500
    key = ("event_id", "kind")
    assert sorted(_payload(back).to_pylist(), key=lambda r: tuple(r[k] for k in key)) == sorted(
        events_table(500).to_pylist(), key=lambda r: tuple(r[k] for k in key)
    )


_attempts = itertools.count()


@dg.asset(key=["raw", "flaky"], retry_policy=dg.RetryPolicy(max_retries=1))
def flaky() -> pa.RecordBatchReader:
    first_attempt = next(_attempts) == 0

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, 1_000, 100):
            if first_attempt and start == 600:
                raise RuntimeError("source went away after 600 rows")
            yield pa.record_batch({"event_id": pa.array(range(start, start + 100), pa.int64())})

    return pa.RecordBatchReader.from_batches(pa.schema([("event_id", pa.int64())]), batches())


def test_retried_step_resumes_from_coverage(zerobus: ZerobusResource, resources: dict) -> None:
    result = dg.materialize([flaky], resources=resources)
    assert result.success
    meta = result.asset_materializations_for_node("raw__flaky")[0].metadata
    assert meta["dagster/row_count"].value == 1_000
    written, skipped = meta["zerobus/rows_written"].value, meta["zerobus/rows_skipped"].value
    assert (written, skipped) == (400, 600), (
        "the retry must resume after the 600 rows the first attempt delivered"
    )
    back = read_all(zerobus, "main.raw.flaky", "raw/flaky")
    ids = back["event_id"].to_pylist()
    assert sorted(ids) == list(range(1_000)), "the retry sent covered rows again or lost some"


def test_reexecution_from_failure_resumes_the_root_runs_coverage(
    zerobus: ZerobusResource, zb_config: ZerobusConfig, tmp_path: Path
) -> None:
    job = dg.build_reconstructable_job(
        "tests.support.dagster_reexec_job",
        "build_job",
        reconstructable_args=(str(zb_config.warehouse), str(tmp_path / "failed-once")),
        reconstructor_working_directory=str(REPO),
    )
    with dg.instance_for_test() as instance:
        with dg.execute_job(job, instance=instance, raise_on_error=False) as failed:
            assert not failed.success
            root_run_id = failed.run_id
        options = dg.ReexecutionOptions.from_failure(root_run_id, instance)
        with dg.execute_job(job, instance=instance, reexecution_options=options) as retried:
            assert retried.success
            assert retried.run_id != root_run_id
            # Keyed on root_run_id, not the dagster/is_resume_retry tag: execute_job's re-execution
            # sets the former only, and the tag is missing for "all steps" re-executions too.
            assert retried.dagster_run.root_run_id == root_run_id
            (materialization,) = retried.asset_materializations_for_node("raw__reexecuted")
    meta = {k: v.value for k, v in materialization.metadata.items()}
    assert meta["zerobus/partition"] == f"@{root_run_id}", "a re-execution keeps the root run's coverage"
    assert (meta["zerobus/rows_written"], meta["zerobus/rows_skipped"]) == (ROWS - FAIL_AFTER, FAIL_AFTER)
    ids = read_all(zerobus, "main.raw.reexecuted", "raw/reexecuted")["event_id"].to_pylist()
    assert sorted(ids) == list(range(ROWS)), "the re-execution sent covered rows again or lost some"


REGIONS = dg.StaticPartitionsDefinition(["eu", "us"])


@dg.asset(key=["raw", "sales"], partitions_def=REGIONS, metadata={"partition_expr": "region"})
def sales(context: dg.AssetExecutionContext) -> pa.Table:
    region = context.partition_key
    n = 30 if region == "eu" else 20
    return pa.table({"region": [region] * n, "amount": pa.array([float(i) for i in range(n)])})


@dg.asset(
    key=["analytics", "sales_total"], partitions_def=REGIONS, ins={"sales": dg.AssetIn(["raw", "sales"])}
)
def sales_total(sales: pa.Table) -> pa.Table:
    regions = pc.unique(sales["region"]).to_pylist()
    return pa.table(
        {"regions": [",".join(regions)], "rows": [sales.num_rows], "total": [pc.sum(sales["amount"]).as_py()]}
    )


def test_partitions_become_coverage_partitions_and_filter_inputs(
    zerobus: ZerobusResource, resources: dict
) -> None:
    run_ids = {}
    for region in ("eu", "us"):
        result = dg.materialize([sales, sales_total], resources=resources, partition_key=region)
        assert result.success
        run_ids[region] = result.run_id
        meta = result.asset_materializations_for_node("raw__sales")[0].metadata
        assert meta["zerobus/partition"].value == f"{region}@{result.run_id}"
        assert meta["dagster/partition_row_count"].value == (30 if region == "eu" else 20)
    rt = zerobus.runtime
    assert rt.covered("main.raw.sales", source="raw/sales", partition=f"eu@{run_ids['eu']}") == (
        OffsetRange(0, 30),
    )
    assert rt.covered("main.raw.sales", source="raw/sales", partition=f"us@{run_ids['us']}") == (
        OffsetRange(0, 20),
    )
    totals = read_all(zerobus, "main.analytics.sales_total", "analytics/sales_total")
    by_region = {row["regions"]: row["rows"] for row in totals.to_pylist()}
    assert by_region == {"eu": 30, "us": 20}, "each partition's input must hold only its own rows"


def test_load_input_pushes_the_partition_filter_and_columns_down_to_the_scan(
    zerobus: ZerobusResource, resources: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The input of partition ``us`` is read with ``region IN ('us')`` and only the columns the selection
    needs in the Iceberg scan itself (as dagster-deltalake does): the scan returns the 20 rows of ``us``,
    not the 50 of the table, and files holding only ``eu`` are not read. The old IO manager scanned the
    whole table and filtered in memory."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.table import DataScan

    for region in ("eu", "us"):  # two materialisations: two commits, two files
        assert dg.materialize([sales], resources=resources, partition_key=region).success
    scans: list[tuple[object, tuple[str, ...], int, int]] = []
    real_to_arrow, real_plan = DataScan.to_arrow, DataScan.plan_files

    def to_arrow(self: DataScan) -> pa.Table:
        rows = real_to_arrow(self)
        scans.append(
            (self.row_filter, tuple(self.selected_fields), rows.num_rows, len(list(real_plan(self))))
        )
        return rows

    monkeypatch.setattr(DataScan, "to_arrow", to_arrow)
    assert dg.materialize(
        [sales, sales_total], resources=resources, partition_key="us", selection=[sales_total]
    ).success

    loads = [scan for scan in scans if "region" in repr(scan[0])]  # read-back's own scans filter on the tag
    assert len(loads) == 1, f"the input's scan must filter on the partition column: {scans}"
    row_filter, _, rows, files = loads[0]
    assert row_filter != AlwaysTrue() and "'us'" in repr(row_filter)
    assert rows == 20 and files == 1, "the scan itself must keep only the partition's rows and file"
    totals = read_all(zerobus, "main.analytics.sales_total", "analytics/sales_total")
    assert [(r["regions"], r["rows"]) for r in totals.to_pylist()] == [("us", 20)]


@dg.asset(key=["raw", "pandas_orders"])
def pandas_orders() -> pd.DataFrame:
    return pd.DataFrame({"order_id": [1, 2, 3], "amount": [1.5, 2.5, 3.5], "note": ["a", None, "c"]})


@dg.asset(key=["derived", "polars_from_pandas"], ins={"orders": dg.AssetIn(["raw", "pandas_orders"])})
def polars_from_pandas(orders: pl.DataFrame) -> pl.DataFrame:
    assert isinstance(orders, pl.DataFrame)
    return orders.select(pl.col("order_id"), (pl.col("amount") * 2).alias("double_amount"))


@dg.asset(
    key=["derived", "pandas_from_polars"], ins={"doubled": dg.AssetIn(["derived", "polars_from_pandas"])}
)
def pandas_from_polars(doubled: pd.DataFrame) -> pd.DataFrame:
    assert isinstance(doubled, pd.DataFrame)
    return doubled.assign(triple=doubled["order_id"] * 3)


def test_pandas_and_polars_frames_write_and_load(zerobus: ZerobusResource, resources: dict) -> None:
    result = dg.materialize([pandas_orders, polars_from_pandas, pandas_from_polars], resources=resources)
    assert result.success
    back = read_all(zerobus, "main.derived.pandas_from_polars", "derived/pandas_from_polars")
    rows = sorted(_payload(back).to_pylist(), key=lambda r: r["order_id"])
    assert rows == [
        {"order_id": 1, "double_amount": 3.0, "triple": 3},
        {"order_id": 2, "double_amount": 5.0, "triple": 6},
        {"order_id": 3, "double_amount": 7.0, "triple": 9},
    ]
    raw = read_all(zerobus, "main.raw.pandas_orders", "raw/pandas_orders")
    notes = {r["order_id"]: r["note"] for r in _payload(raw).to_pylist()}
    assert notes == {1: "a", 2: None, 3: "c"}
    assert "__index_level_0__" not in raw.column_names


@dg.asset(key=["raw", "profiles"])
def profiles() -> pa.Table:
    return pa.table({"user_id": pa.array([1, 2], pa.int64()), "payload": ["{}", "{}"]})


@dg.asset(key=["raw", "profiles_v2"], metadata={"zerobus/table": "profiles"})
def profiles_nested() -> pa.Table:
    payload = pa.array([{"a": 1}, {"a": 2}], pa.struct([("a", pa.int64())]))
    return pa.table({"user_id": pa.array([3, 4], pa.int64()), "payload": payload})


def test_bad_column_fails_the_step_naming_the_column(zerobus: ZerobusResource, resources: dict) -> None:
    assert dg.materialize([profiles], resources=resources).success
    result = dg.materialize([profiles_nested], resources=resources, raise_on_error=False)
    assert not result.success
    failures = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1
    message = failures[0].step_failure_data.error.to_string()
    assert "payload" in message and "main.raw.profiles" in message
    user_failure = failures[0].step_failure_data.user_failure_data
    assert user_failure is not None
    assert user_failure.metadata["column"].value == "payload"
    assert user_failure.metadata["kind"].value == "nested_into_string"
    assert not result.asset_materializations_for_node("raw__profiles_v2")
    back = read_all(zerobus, "main.raw.profiles", "raw/profiles")
    assert back.num_rows == 2, "nothing of the bad write may land"


def test_io_manager_config_is_documented() -> None:
    fields = ZerobusIOManager.model_fields
    # Dagster replaces the nested resource field's info; every plain config field keeps its description.
    assert all(f.description for name, f in fields.items() if name != "zerobus"), "undocumented config field"
    assert all(f.description for f in ZerobusResource.model_fields.values())


def test_embedded_default_needs_no_endpoint(zb_config: ZerobusConfig) -> None:
    assert zb_config.embedded
    assert ZerobusResource.from_config(zb_config).runtime.embedded


@dg.asset(key=["raw", "streamed"])
def streamed(context: dg.AssetExecutionContext, zerobus: ZerobusResource) -> dg.MaterializeResult:
    source, partition = coverage_keys(context)
    result = zerobus.write(
        "main.raw.streamed",
        (pa.record_batch({"n": pa.array(range(i, i + 50), pa.int64())}) for i in range(0, 200, 50)),
        source=source,
        partition=partition,
    )
    return dg.MaterializeResult(metadata={"dagster/row_count": result.rows_written})


def test_asset_streaming_its_own_data_through_the_resource(zerobus: ZerobusResource) -> None:
    result = dg.materialize([streamed], resources={"zerobus": zerobus})
    assert result.success
    assert (
        result.asset_materializations_for_node("raw__streamed")[0].metadata["dagster/row_count"].value == 200
    )
    assert zerobus.runtime.covered(
        "main.raw.streamed", source="raw/streamed", partition=f"@{result.run_id}"
    ) == (OffsetRange(0, 200),)
    assert sorted(read_all(zerobus, "main.raw.streamed", "raw/streamed")["n"].to_pylist()) == list(range(200))


def test_a_write_is_bounded_by_its_run_groups_creation(
    zerobus: ZerobusResource, resources: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The IO manager passes the root run's creation time as ``not_before``: a resume of the step reads
    only the table's files of rows stamped since (the bound itself is proven in the runtime's tests)."""
    seen: list[object] = []
    real_write = ZerobusRuntime.write

    def spy(self: ZerobusRuntime, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("not_before"))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(ZerobusRuntime, "write", spy)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([*events_contract.definitions, events], resources=resources, instance=instance)
    assert result.success
    record = instance.get_run_record_by_id(result.run_id)
    assert record is not None and seen == [record.create_timestamp.astimezone(dt.UTC)]
