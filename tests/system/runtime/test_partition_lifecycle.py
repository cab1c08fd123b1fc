"""A partition's lifecycle through the real runtime (official SDK, embedded emulator, real Delta): runs of a
logical partition, re-runs with the same content (nothing sent), with other content (a derived partition
replaced, primary raw refused before anything is sent), and the same run re-executed with other content
(its next revision). Every check reads the Delta table itself."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.config import Role
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.errors import RerunRefusedError, ResumeMismatchError
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime

DERIVED, RAW = "main.derived.daily", "main.raw.events"


def rows(n: int, start: int = 0, day: str = "d1") -> pa.Table:
    return pa.table({"day": [day] * n, "v": pa.array(range(start, start + n), pa.int64())})


def stream(table: pa.Table, batch_rows: int = 100) -> Iterator[pa.RecordBatch]:
    """A generator of batches: read once, like a file or a query (the runtime cannot iterate it twice)."""
    yield from table.to_batches(max_chunksize=batch_rows)


def delta(rt: ZerobusRuntime, table: str) -> DeltaTable:
    reader = table_truth.reader_for(rt.catalog, rt.config, table)
    assert reader is not None
    return DeltaTable(reader.uri)


def by_tag(rt: ZerobusRuntime, table: str) -> dict[str, list[int]]:
    """``v`` values per ``_twg_source`` in the table, sorted."""
    data = delta(rt, table).to_pyarrow_table(columns=[SOURCE, "v"])
    out: dict[str, list[int]] = {}
    for tag, value in zip(data[SOURCE].to_pylist(), data["v"].to_pylist(), strict=True):
        out.setdefault(tag, []).append(value)
    return {tag: sorted(values) for tag, values in out.items()}


def test_a_rerun_with_the_same_content_sends_nothing_and_says_already_delivered(
    runtime: ZerobusRuntime,
) -> None:
    first = runtime.write(DERIVED, rows(300), source="daily", partition="d1@run-1", role=Role.DERIVED)
    version = delta(runtime, DERIVED).version()

    # Another run, the same rows, batched differently and streamed: compared with the table, not sent.
    again = runtime.write(
        DERIVED, stream(rows(300), batch_rows=70), source="daily", partition="d1@run-2", role=Role.DERIVED
    )

    assert (first.already_delivered, first.rows_written) == (False, 300)
    assert again.already_delivered and again.delivered_by == "daily[d1@run-1]"
    assert (again.rows_written, again.rows_skipped, again.superseded_sources) == (0, 300, ())
    assert again.source_tag == "daily[d1@run-1]" and again.partition == "d1@run-1", "where the rows are"
    assert again.logical_partition == "d1"
    assert delta(runtime, DERIVED).version() == version, "nothing committed: not even a delete"
    assert by_tag(runtime, DERIVED) == {"daily[d1@run-1]": list(range(300))}


def test_a_derived_rerun_with_other_content_replaces_the_partition(runtime: ZerobusRuntime) -> None:
    runtime.write(DERIVED, rows(300), source="daily", partition="d1@run-1", role=Role.DERIVED)
    runtime.write(DERIVED, rows(10, day="d2"), source="daily", partition="d2@run-1", role=Role.DERIVED)
    corrected = rows(300).set_column(1, "v", pa.array([*range(299), 10_000], pa.int64()))  # the last row

    # A stream differing only in its last row: the compared rows are read back from a spill, all sent.
    result = runtime.write(
        DERIVED, stream(corrected), source="daily", partition="d1@run-2", role=Role.DERIVED
    )

    assert not result.already_delivered and result.rows_written == 300
    assert result.superseded_sources == ("daily[d1@run-1]",)
    assert by_tag(runtime, DERIVED) == {
        "daily[d1@run-2]": [*range(299), 10_000],
        "daily[d2@run-1]": list(range(10)),
    }


def test_a_raw_rerun_with_other_content_is_refused_before_anything_is_sent(runtime: ZerobusRuntime) -> None:
    runtime.write(RAW, rows(200), source="events", partition="d1@run-1", role=Role.PRIMARY_RAW)
    version = delta(runtime, RAW).version()

    with pytest.raises(RerunRefusedError) as refused:
        runtime.write(
            RAW, stream(rows(200, start=5)), source="events", partition="d1@run-2", role=Role.PRIMARY_RAW
        )

    message = str(refused.value)
    for part in (
        RAW,
        "'d1'",
        "events[d1@run-1]",
        "nothing was sent",
        "allow_raw_replace=True",
        "role='derived'",
    ):
        assert part in message, message
    assert refused.value.existing == "events[d1@run-1]"
    assert delta(runtime, RAW).version() == version
    assert by_tag(runtime, RAW) == {"events[d1@run-1]": list(range(200))}

    # The same content is a no-op; the opt-in replaces.
    same = runtime.write(RAW, rows(200), source="events", partition="d1@run-3", role=Role.PRIMARY_RAW)
    assert same.already_delivered and same.delivered_by == "events[d1@run-1]"
    replaced = runtime.write(
        RAW,
        rows(200, start=5),
        source="events",
        partition="d1@run-4",
        role=Role.PRIMARY_RAW,
        allow_raw_replace=True,
    )
    assert replaced.superseded_sources == ("events[d1@run-1]",)
    assert by_tag(runtime, RAW) == {"events[d1@run-4]": list(range(5, 205))}


def test_a_raw_rerun_that_extends_the_earlier_run_sends_only_the_rows_it_lacks(
    runtime: ZerobusRuntime,
) -> None:
    runtime.write(RAW, rows(200), source="events", partition="d1@run-1", role=Role.PRIMARY_RAW)

    more = runtime.write(RAW, stream(rows(260)), source="events", partition="d1@run-2", role=Role.PRIMARY_RAW)

    assert (more.rows_written, more.rows_skipped) == (60, 200)
    assert more.partition == "d1@run-1", "the rest of the earlier run, delivered as that run"
    assert by_tag(runtime, RAW) == {"events[d1@run-1]": list(range(260))}


def test_rows_a_delete_took_from_a_raw_run_are_sent_again_as_that_run_with_resume_off(
    runtime: ZerobusRuntime,
) -> None:
    """docs/runbook.md's recipe for ``lost`` rows, on a run of a partition: re-run with resume off, then
    repair --dedupe. The re-run fills the hole the delete left, so it extends the earlier run: sent whole
    again as that run (before, resume off was dropped there and nothing was sent: the rows stayed lost)."""
    runtime.write(RAW, rows(200), source="events", partition="d1@run-1", role=Role.PRIMARY_RAW)
    delta(runtime, RAW).delete("_twg_offset >= 50 AND _twg_offset < 80")
    assert len(by_tag(runtime, RAW)["events[d1@run-1]"]) == 170

    plain = runtime.write(RAW, rows(200), source="events", partition="d1@run-2", role=Role.PRIMARY_RAW)
    assert plain.partition == "d1@run-1" and plain.rows_written == 0, "coverage says all were delivered"

    again = runtime.write(
        RAW, rows(200), source="events", partition="d1@run-3", role=Role.PRIMARY_RAW, resume=False
    )

    assert again.partition == "d1@run-1" and again.rows_written == 200
    held = by_tag(runtime, RAW)
    assert set(held) == {"events[d1@run-1]"} and sorted(set(held["events[d1@run-1]"])) == list(range(200))
    assert len(held["events[d1@run-1]"]) == 370, "170 kept + 200 again: repair --dedupe keeps one of each"


def test_the_same_run_reexecuted_with_other_content_writes_its_next_revision(runtime: ZerobusRuntime) -> None:
    """An Airflow task cleared after its input was corrected: the same run id, other rows."""
    runtime.write(DERIVED, rows(120), source="daily", partition="d1@scheduled__1", role=Role.DERIVED)

    corrected = runtime.write(
        DERIVED, stream(rows(120, start=7)), source="daily", partition="d1@scheduled__1", role=Role.DERIVED
    )
    assert corrected.partition == "d1@scheduled__1#2" and corrected.rows_written == 120
    assert corrected.superseded_sources == ("daily[d1@scheduled__1]",)
    assert by_tag(runtime, DERIVED) == {"daily[d1@scheduled__1#2]": list(range(7, 127))}

    # Cleared again with the corrected input: the latest revision resumes, nothing sent.
    again = runtime.write(
        DERIVED, rows(120, start=7), source="daily", partition="d1@scheduled__1", role=Role.DERIVED
    )
    assert again.already_delivered and again.partition == "d1@scheduled__1#2"
    assert by_tag(runtime, DERIVED) == {"daily[d1@scheduled__1#2]": list(range(7, 127))}

    # Raw keeps its record: the same re-execution is refused there, naming the choices.
    runtime.write(RAW, rows(50), source="events", partition="d1@scheduled__1", role=Role.PRIMARY_RAW)
    with pytest.raises(RerunRefusedError, match="allow_raw_replace") as refused:
        runtime.write(
            RAW, rows(50, start=1), source="events", partition="d1@scheduled__1", role=Role.PRIMARY_RAW
        )
    assert isinstance(refused.value.__cause__, ResumeMismatchError)
    assert by_tag(runtime, RAW) == {"events[d1@scheduled__1]": list(range(50))}


def test_resume_false_in_replace_writes_a_new_revision_instead_of_a_second_copy(
    runtime: ZerobusRuntime,
) -> None:
    """Before, ``resume=False`` sent the run's rows again under the same tag: both versions stayed."""
    runtime.write(
        DERIVED, rows(80), source="daily", partition="d1@manual__1", role=Role.DERIVED, mode="replace"
    )

    result = runtime.write(
        DERIVED,
        rows(80, start=3),
        source="daily",
        partition="d1@manual__1",
        role=Role.DERIVED,
        mode="replace",
        resume=False,
    )

    assert result.partition == "d1@manual__1#2"
    assert result.superseded_sources == ("daily[d1@manual__1]",)
    assert by_tag(runtime, DERIVED) == {"daily[d1@manual__1#2]": list(range(3, 83))}


def test_append_keeps_every_run_even_with_the_same_content(runtime: ZerobusRuntime) -> None:
    for run in ("run-1", "run-2"):
        runtime.write(
            RAW, rows(40), source="events", partition=f"d1@{run}", role=Role.PRIMARY_RAW, mode="append"
        )
    counts = pc.value_counts(delta(runtime, RAW).to_pyarrow_table(columns=[SOURCE])[SOURCE]).to_pylist()
    assert {c["values"]: c["counts"] for c in counts} == {"events[d1@run-1]": 40, "events[d1@run-2]": 40}


def _guide_view_query(table: str) -> str:
    """The SELECT of the view docs/guides/write-modes.md gives, on ``table``."""
    from pathlib import Path

    guide = (Path(__file__).parents[3] / "docs" / "guides" / "write-modes.md").read_text()
    block = guide.split("<!-- latest-runs-view:", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    select = block.split(" AS\n", 1)[1]  # after "CREATE OR REPLACE VIEW ... AS"
    return select.replace("main.derived.daily", table)


def test_readers_take_the_settled_run_of_each_partition_helper_and_sql_view(runtime: ZerobusRuntime) -> None:
    from deltalake import QueryBuilder

    from zerobus_orchestration.write_modes import latest_run_filter

    runtime.write(DERIVED, rows(30), source="daily", partition="d1@run-1", role=Role.DERIVED)
    runtime.write(DERIVED, rows(5, day="d2"), source="daily", partition="d2@run-1", role=Role.DERIVED)
    runtime.write(DERIVED, rows(7, day="x"), source="other", partition="d1@run-1", role=Role.DERIVED)
    # A newer run of d1 whose rows are in the table, still before its replace step: readers skip it.
    runtime.write(
        DERIVED, rows(30, start=100), source="daily", partition="d1@run-2", role=Role.DERIVED, mode="append"
    )
    assert set(by_tag(runtime, DERIVED)) == {
        "daily[d1@run-1]",
        "daily[d1@run-2]",
        "daily[d2@run-1]",
        "other[d1@run-1]",
    }

    settled = runtime.latest_runs(DERIVED, source="daily")
    assert settled == {"d1": "daily[d1@run-1]", "d2": "daily[d2@run-1]"}

    table = delta(runtime, DERIVED)
    query = f"SELECT v, _twg_source FROM t WHERE {latest_run_filter(*settled.values())}"
    picked = pa.table(QueryBuilder().register("t", table).execute(query).read_all())
    assert sorted(picked["v"].to_pylist()) == sorted([*range(30), *range(5)])

    # The view (the guide's text, run by DataFusion here): the same runs, for every source of the table.
    viewed = pa.table(QueryBuilder().register("t", table).execute(_guide_view_query("t")).read_all())
    counts = {c["values"]: c["counts"] for c in pc.value_counts(viewed["_twg_source"]).to_pylist()}
    assert counts == {"daily[d1@run-1]": 30, "daily[d2@run-1]": 5, "other[d1@run-1]": 7}
