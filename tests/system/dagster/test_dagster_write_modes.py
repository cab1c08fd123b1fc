"""Write modes through ``dg.materialize``: a re-materialised partition with the same output sends nothing,
with other output replaces it; a failed write says how many rows landed and how to resume."""

from collections.abc import Iterator

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from dagster_defs import ZerobusIOManager, ZerobusResource
from dagster_defs.sensors import WriteTarget
from zerobus_orchestration.ranges import OffsetRange

DAYS = dg.StaticPartitionsDefinition(["2024-01-01", "2024-01-02"])
CLICKS = 240
SEEN: list[int] = []  # rows each downstream run loaded
FIRST_ID = {"clicks": 0}  # the click ids of the next run start here: other output, a real re-run


@dg.asset(
    key=["web", "clicks"],
    partitions_def=DAYS,
    metadata={"partition_expr": "day", "zerobus/role": "derived", "zerobus/write_mode": "replace"},
)
def clicks(context: dg.AssetExecutionContext) -> pa.Table:
    first = FIRST_ID["clicks"]
    return pa.table(
        {
            "day": [context.partition_key] * CLICKS,
            "click_id": pa.array(range(first, first + CLICKS), pa.int64()),
        }
    )


@dg.asset(
    key=["web", "daily_clicks"],
    partitions_def=DAYS,
    ins={"clicks": dg.AssetIn(["web", "clicks"])},
    metadata={"partition_expr": "day", "zerobus/role": "derived", "zerobus/write_mode": "replace"},
)
def daily_clicks(context: dg.AssetExecutionContext, clicks: pa.Table) -> pa.Table:
    SEEN.append(clicks.num_rows)
    return pa.table({"day": [context.partition_key], "clicks": [clicks.num_rows]})


def test_rematerialising_a_partition_replaces_it(zerobus: ZerobusResource, resources: dict) -> None:
    SEEN.clear()
    runs = []
    for day, first_id in (("2024-01-01", 0), ("2024-01-02", 0), ("2024-01-01", 5_000)):
        FIRST_ID["clicks"] = first_id
        runs.append(dg.materialize([clicks, daily_clicks], resources=resources, partition_key=day))
    FIRST_ID["clicks"] = 0
    assert all(r.success for r in runs)
    assert SEEN == [CLICKS, CLICKS, CLICKS], "the downstream must read the re-run partition once"
    first, _, again = runs
    meta = again.asset_materializations_for_node("web__clicks")[0].metadata
    assert meta["zerobus/superseded_runs"].value == [f"web/clicks[2024-01-01@{first.run_id}]"]
    target = WriteTarget.from_metadata(meta)
    assert target is not None and target.replaces == "2024-01-01", "the sensor must check the other runs"

    rt = zerobus.runtime
    assert rt.covered("main.web.clicks", source="web/clicks", partition=f"2024-01-01@{first.run_id}") == ()
    assert rt.covered("main.web.clicks", source="web/clicks", partition=f"2024-01-01@{again.run_id}") == (
        OffsetRange(0, CLICKS),
    )
    for table, source in (("main.web.clicks", "web/clicks"), ("main.web.daily_clicks", "web/daily_clicks")):
        report = rt.verify(table, source=source)
        assert report.verified, report.to_json()
    raw = rt.read_rows("main.web.clicks")
    per_day = {c["values"]: c["counts"] for c in pc.value_counts(raw["day"]).to_pylist()}
    assert per_day == {"2024-01-01": CLICKS, "2024-01-02": CLICKS}, "480 would be a second copy"
    assert raw.filter(pc.equal(raw["day"], "2024-01-01"))["_twg_source"].unique().to_pylist() == [
        f"web/clicks[2024-01-01@{again.run_id}]"
    ]
    totals = sorted((r["day"], r["clicks"]) for r in rt.read_rows("main.web.daily_clicks").to_pylist())
    assert totals == [("2024-01-01", CLICKS), ("2024-01-02", CLICKS)]


@dg.asset(key=["web", "snapshot"], metadata={"zerobus/role": "derived"})
def snapshot() -> pa.Table:
    return pa.table({"n": pa.array(range(10), pa.int64())})


def test_manager_write_mode_replaces_an_unpartitioned_table(zerobus: ZerobusResource) -> None:
    manager = ZerobusIOManager(zerobus=zerobus, write_mode="replace")
    for _ in range(2):
        result = dg.materialize([snapshot], resources={"io_manager": manager})
        assert result.success
    meta = result.asset_materializations_for_node("web__snapshot")[0].metadata
    assert meta["zerobus/already_delivered"].value is True, "the same output twice: nothing sent"
    rt = zerobus.runtime
    assert rt.verify("main.web.snapshot", source="web/snapshot").verified
    assert rt.read_rows("main.web.snapshot").num_rows == 10


@dg.asset(key=["web", "raw_hits"])
def raw_hits() -> pa.Table:
    return pa.table({"n": pa.array(range(10), pa.int64())})


def test_replace_on_a_primary_raw_asset_fails_naming_the_setting(zerobus: ZerobusResource) -> None:
    manager = ZerobusIOManager(zerobus=zerobus, write_mode="replace", role="primary_raw")
    result = dg.materialize([raw_hits], resources={"io_manager": manager}, raise_on_error=False)
    assert not result.success
    text = _failure_text(result, "web__raw_hits")
    assert "write_mode='replace'" in text and "primary_raw" in text and "role='derived'" in text, text
    assert zerobus.runtime.catalog.describe("main.web.raw_hits") is None, "nothing may be sent"


FAIL_AFTER = 600


@dg.asset(key=["web", "stream"])
def stream() -> pa.RecordBatchReader:
    schema = pa.schema([("n", pa.int64())])

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, 1_000, 100):
            if start == FAIL_AFTER:
                raise RuntimeError("upstream API went away")
            yield pa.record_batch({"n": pa.array(range(start, start + 100), pa.int64())})

    return pa.RecordBatchReader.from_batches(schema, batches())


def test_a_failed_append_says_how_many_rows_landed_and_how_to_resume(
    zerobus: ZerobusResource, resources: dict
) -> None:
    result = dg.materialize([stream], resources=resources, raise_on_error=False)
    assert not result.success
    text = _failure_text(result, "web__stream")
    assert "upstream API went away" in text, text
    assert f"{FAIL_AFTER} row(s) landed in main.web.stream" in text, text
    assert "re-execute this run" in text and "write_mode='replace'" in text, text
    landed = zerobus.runtime.covered("main.web.stream", source="web/stream", partition=f"@{result.run_id}")
    assert landed == (OffsetRange(0, FAIL_AFTER),), "the note must state what really landed"


def _failure_text(result: dg.ExecuteInProcessResult, node: str) -> str:
    """Every message of the step's failure, down its cause and context chain."""
    (event,) = [e for e in result.get_step_failure_events() if e.step_key == node]
    error = event.step_failure_data.error
    parts: list[str] = []
    while error is not None:
        parts.append(error.to_string())
        error = error.cause or error.context
    return "\n".join(parts)
