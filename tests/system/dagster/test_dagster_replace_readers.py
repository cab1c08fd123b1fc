"""Readers of a ``replace``-mode asset through ``dg.materialize``: a downstream reads the run the latest
materialisation names, never a newer run that is still written or not yet past its delete; and a run
over a partition range refuses ``replace`` before anything is sent (docs/adr/0007-write-modes.md)."""

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_defs import ZerobusResource
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import CatalogError

DAYS = dg.StaticPartitionsDefinition(["2024-01-01", "2024-01-02", "2024-01-03"])
DAY = "2024-01-01"
CLICKS = 240
SEEN: list[int] = []  # rows each downstream run loaded
FIRST_ID = {"clicks": 0}  # what the next run of ``clicks`` starts its click ids at: a new run, new content
REPLACE = {"partition_expr": "day", "zerobus/role": "derived", "zerobus/write_mode": "replace"}


@dg.asset(key=["web", "clicks"], partitions_def=DAYS, metadata=REPLACE)
def clicks(context: dg.AssetExecutionContext) -> pa.Table:
    return _days(context.partition_keys, FIRST_ID["clicks"])


def _days(keys: list[str], first: int = 0) -> pa.Table:
    days = [d for d in keys for _ in range(CLICKS)]
    return pa.table({"day": days, "click_id": pa.array(range(first, first + len(days)), pa.int64())})


@dg.asset(
    key=["web", "daily_clicks"],
    partitions_def=DAYS,
    ins={"clicks": dg.AssetIn(["web", "clicks"])},
    metadata=REPLACE,
)
def daily_clicks(context: dg.AssetExecutionContext, clicks: pa.Table) -> pa.Table:
    SEEN.append(clicks.num_rows)
    return pa.table({"day": [context.partition_key], "clicks": [clicks.num_rows]})


def _day_rows(zerobus: ZerobusResource, table: str) -> pa.Table:
    rows = zerobus.runtime.read_rows(table)
    return rows.filter(pc.equal(rows["day"], DAY))


def test_a_downstream_reads_the_last_complete_run_while_a_newer_one_is_not_past_its_delete(
    zerobus: ZerobusResource, resources: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    SEEN.clear()
    FIRST_ID["clicks"] = 0
    instance = dg.DagsterInstance.ephemeral()
    first = dg.materialize([clicks, daily_clicks], resources=resources, instance=instance, partition_key=DAY)
    assert first.success and SEEN == [CLICKS]

    # Run 2 of the partition, with other clicks: its rows become durable and visible, then its delete fails.
    FIRST_ID["clicks"] = 10_000
    rt = zerobus.runtime

    def refuse_delete(*_args: object, **_kwargs: object) -> None:
        raise CatalogError("injected: the warehouse refused the DELETE")

    monkeypatch.setattr(rt.catalog, "delete_rows", refuse_delete)
    second = dg.materialize(
        [clicks], resources=resources, instance=instance, partition_key=DAY, raise_on_error=False
    )
    monkeypatch.undo()
    assert not second.success
    (failure,) = second.get_step_failure_events()
    assert "injected: the warehouse refused the DELETE" in failure.step_failure_data.error.to_string()
    rt.verify("main.web.clicks", source="web/clicks")
    both = _day_rows(zerobus, "main.web.clicks")
    assert both.num_rows == 2 * CLICKS, "the fault must leave both runs' rows in the table"
    assert set(both["_twg_source"].to_pylist()) == {
        f"web/clicks[{DAY}@{first.run_id}]",
        f"web/clicks[{DAY}@{second.run_id}]",
    }

    # A downstream run in the window reads the complete run 1 once, not 480 rows.
    third = dg.materialize(
        [clicks, daily_clicks],
        selection=[daily_clicks],
        resources=resources,
        instance=instance,
        partition_key=DAY,
    )
    assert third.success
    assert SEEN == [CLICKS, CLICKS], "the downstream must read one run of the partition, not both"
    totals = _day_rows(zerobus, "main.web.daily_clicks")
    assert totals["clicks"].to_pylist() == [CLICKS]
    messages = [e.user_message for e in instance.all_logs(third.run_id)]
    assert any(f"skipped the rows of ['web/clicks[{DAY}@{second.run_id}]']" in m for m in messages), messages
    assert not any("no materialisation" in m for m in messages), "the other days must not be reported"


@dg.asset(key=["web", "snapshot"], metadata={"zerobus/role": "derived", "zerobus/write_mode": "replace"})
def snapshot() -> pa.Table:
    return pa.table({"n": pa.array(range(10), pa.int64())})


@dg.asset(key=["web", "snapshot_size"], metadata={"zerobus/role": "derived"})
def snapshot_size(snapshot: pa.Table) -> pa.Table:
    SEEN.append(snapshot.num_rows)
    return pa.table({"rows": [snapshot.num_rows]})


def test_an_unpartitioned_input_skips_a_run_that_was_never_materialised(
    zerobus: ZerobusResource, resources: dict
) -> None:
    SEEN.clear()
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([snapshot], resources=resources, instance=instance).success
    # A newer run's rows are visible before its materialisation exists (still writing, or crashed).
    rt = zerobus.runtime
    half = pa.table({"n": pa.array(range(4), pa.int64())})
    rt.write(  # appended: a run that has not reached its replace step yet
        "main.web.snapshot",
        half,
        source="web/snapshot",
        partition="@run-still-writing",
        role=Role.DERIVED,
        mode="append",
    )
    rt.verify("main.web.snapshot", source="web/snapshot")
    assert rt.read_rows("main.web.snapshot").num_rows == 14, (
        "both runs must be visible for the test to mean it"
    )

    result = dg.materialize(
        [snapshot, snapshot_size], selection=[snapshot_size], resources=resources, instance=instance
    )
    assert result.success
    assert SEEN == [10], "only the materialised run is read"


@dg.asset(key=["web", "hits"], metadata={"zerobus/role": "derived", "zerobus/write_mode": "append"})
def hits() -> pa.Table:
    return pa.table({"n": pa.array(range(10), pa.int64())})


@dg.asset(key=["web", "hit_count"], metadata={"zerobus/role": "derived"})
def hit_count(hits: pa.Table) -> pa.Table:
    SEEN.append(hits.num_rows)
    return pa.table({"rows": [hits.num_rows]})


def test_an_append_mode_input_still_reads_every_run(resources: dict) -> None:
    SEEN.clear()
    instance = dg.DagsterInstance.ephemeral()
    for _ in range(2):
        assert dg.materialize([hits], resources=resources, instance=instance).success
    assert dg.materialize(
        [hits, hit_count], selection=[hit_count], resources=resources, instance=instance
    ).success
    assert SEEN == [20], "append keeps every run's rows"


RANGE = {
    "dagster/asset_partition_range_start": "2024-01-01",
    "dagster/asset_partition_range_end": "2024-01-03",
}


def test_replace_on_a_partition_range_run_is_refused_before_anything_is_sent(
    zerobus: ZerobusResource, resources: dict
) -> None:
    result = dg.materialize([clicks], resources=resources, tags=RANGE, raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    text = failure.step_failure_data.error.to_string()
    assert "web/clicks" in text and "main.web.clicks" in text, text
    assert "2024-01-01...2024-01-03" in text and "BackfillPolicy.multi_run(1)" in text, text
    assert "write_mode='append'" in text, text
    assert zerobus.runtime.catalog.describe("main.web.clicks") is None, "nothing may be sent"


@dg.asset(
    key=["web", "visits"], partitions_def=DAYS, metadata={"partition_expr": "day", "zerobus/role": "derived"}
)
def visits(context: dg.AssetExecutionContext) -> pa.Table:
    return _days(context.partition_keys)


def test_an_append_range_run_still_writes_the_range(zerobus: ZerobusResource, resources: dict) -> None:
    result = dg.materialize([visits], resources=resources, tags=RANGE)
    assert result.success
    # The range's ends in the definition's order (a static subset's keys come in set order).
    partitions = {
        m.metadata["zerobus/partition"].value for m in result.asset_materializations_for_node("web__visits")
    }
    assert partitions == {f"2024-01-01...2024-01-03@{result.run_id}"}
    zerobus.runtime.verify("main.web.visits", source="web/visits")
    assert zerobus.runtime.read_rows("main.web.visits").num_rows == 3 * CLICKS
