"""Write modes and a partition's lifecycle through the real runtime: the official SDK, the embedded
emulator, real Delta. ``replace`` supersedes older runs in the table's order; ``auto`` (the default) makes
a re-run with the same content a no-op, replaces a derived partition and refuses other content on primary
raw before anything is sent."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from zerobus_orchestration.config import Role
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime

TABLE = "main.derived.daily"


def rows(day: str, n: int, start: int = 0) -> pa.Table:
    return pa.table({"day": [day] * n, "clicks": pa.array(range(start, start + n), pa.int64())})


def tags_in_table(rt: ZerobusRuntime) -> dict[str, int]:
    """Rows per ``_twg_source`` read from the Delta table itself (not the coverage cache)."""
    reader = table_truth.reader_for(rt.catalog, rt.config, TABLE)
    assert reader is not None
    from deltalake import DeltaTable

    table = DeltaTable(reader.uri).to_pyarrow_table(columns=[SOURCE])
    counts = pc.value_counts(table[SOURCE]).to_pylist()
    return {c["values"]: c["counts"] for c in counts}


def test_replace_deletes_the_earlier_runs_of_the_same_partition_only(runtime: ZerobusRuntime) -> None:
    write = dict(source="daily", role=Role.DERIVED, mode="replace")
    runtime.write(TABLE, rows("d1", 240), partition="d1@run-1", **write)
    runtime.write(TABLE, rows("d2", 100), partition="d2@run-1", **write)
    assert tags_in_table(runtime) == {"daily[d1@run-1]": 240, "daily[d2@run-1]": 100}

    result = runtime.write(TABLE, rows("d1", 240, start=1), partition="d1@run-2", **write)

    assert result.superseded_sources == ("daily[d1@run-1]",)
    assert tags_in_table(runtime) == {"daily[d1@run-2]": 240, "daily[d2@run-1]": 100}
    assert runtime.covered(TABLE, source="daily", partition="d1@run-1") == (), "coverage of deleted rows"
    assert runtime.covered(TABLE, source="daily", partition="d1@run-2") == (OffsetRange(0, 240),)
    report = runtime.verify(TABLE, source="daily")
    assert report.verified, report.to_json()
    back = runtime.read_rows(TABLE)
    assert back.num_rows == 340, "Iceberg must serve each partition once"


def test_append_keeps_every_run(runtime: ZerobusRuntime) -> None:
    for run in ("run-1", "run-2"):
        result = runtime.write(
            TABLE, rows("d1", 50), source="daily", partition=f"d1@{run}", role=Role.DERIVED, mode="append"
        )
        assert result.superseded_sources == ()
    assert tags_in_table(runtime) == {"daily[d1@run-1]": 50, "daily[d1@run-2]": 50}


def test_replace_is_refused_on_primary_raw_before_anything_is_sent(runtime: ZerobusRuntime) -> None:
    with pytest.raises(ConfigError, match=r"write_mode='replace'.*primary_raw.*role='derived'"):
        runtime.write(
            "main.raw.events",
            rows("d1", 5),
            source="e",
            partition="d1@r",
            role=Role.PRIMARY_RAW,
            mode="replace",
        )
    assert runtime.catalog.describe("main.raw.events") is None


def test_replace_key_must_be_the_writes_own_logical_partition(runtime: ZerobusRuntime) -> None:
    with pytest.raises(ConfigError, match="must write under it"):
        runtime.write(
            TABLE,
            rows("d1", 5),
            source="daily",
            partition="d1@r",
            role=Role.DERIVED,
            mode="replace",
            replace_key="d2",
        )


def test_unknown_write_mode_is_refused(runtime: ZerobusRuntime) -> None:
    with pytest.raises(ConfigError, match="'upsert' is not one of"):
        runtime.write(TABLE, rows("d1", 5), source="daily", role=Role.DERIVED, mode="upsert")


def test_readback_of_a_replace_counts_runs_it_has_not_deleted_yet_then_a_rerun_finishes(
    runtime: ZerobusRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = dict(source="daily", role=Role.DERIVED, mode="replace")
    runtime.write(TABLE, rows("d1", 240), partition="d1@run-1", **write)

    def lost_connection(table: str, rows: object) -> None:
        raise CatalogError("warehouse went away")

    monkeypatch.setattr(runtime.catalog, "delete_rows", lost_connection)
    with pytest.raises(CatalogError, match="warehouse went away"):
        runtime.write(TABLE, rows("d1", 240, start=1), partition="d1@run-2", **write)
    assert tags_in_table(runtime) == {"daily[d1@run-1]": 240, "daily[d1@run-2]": 240}, "the fault acted"

    assert runtime.verify(TABLE, source="daily", partition="d1@run-2").verified  # waits for Iceberg
    plain = runtime.readbacks.verify_once(TABLE, source="daily", partition="d1@run-2")
    assert plain.status is ReadbackStatus.VERIFIED  # the run's own rows are all there...
    judged = runtime.readbacks.verify_once(TABLE, source="daily", partition="d1@run-2", replaces="d1")
    assert judged.status is ReadbackStatus.INCOMPLETE  # ...but the partition holds two runs
    assert judged.duplicate_count == 240
    assert "daily[d1@run-1]" in judged.message and "still in the table" in judged.message

    monkeypatch.undo()
    again = runtime.write(TABLE, rows("d1", 240, start=1), partition="d1@run-2", **write)
    assert (again.rows_written, again.rows_skipped) == (0, 240), "the re-run resumes, then deletes"
    assert again.superseded_sources == ("daily[d1@run-1]",)
    assert runtime.verify(TABLE, source="daily", partition="d1@run-2").verified
    done = runtime.readbacks.verify_once(TABLE, source="daily", partition="d1@run-2", replaces="d1")
    assert done.status is ReadbackStatus.VERIFIED and done.duplicate_count == 0, done.message


def _interleaved(runtime: ZerobusRuntime, monkeypatch: pytest.MonkeyPatch, order: str) -> dict[str, object]:
    """Replace runs ``a`` then ``b`` of partition d1, interleaved as two hosts racing would be: ``a`` is
    durable, then ``b`` writes; ``order`` says whose replace step decides first once both are durable.
    Returns each run's result or the error it raised."""
    import zerobus_orchestration.runtime.facade as facade

    real = facade.supersede
    calls: list[tuple[tuple[object, ...], dict[str, object]]] = []
    outcome: dict[str, object] = {}

    def racing(*args: object, **kwargs: object) -> object:
        calls.append((args, kwargs))
        if len(calls) == 1:  # run a, durable: run b's whole write happens now
            try:
                outcome["b"] = runtime.write(TABLE, rows("d1", 30), partition="d1@b", **write)
            except Exception as exc:
                outcome["b"] = exc
            if "a" in outcome:  # a already decided inside b's replace step
                result = outcome["a"]
                if isinstance(result, Exception):
                    raise result
                return result
            return real(*args, **kwargs)
        if order == "a_first":  # b is durable and visible: a decides before b does
            try:
                outcome["a"] = real(*calls[0][0], **calls[0][1])
            except Exception as exc:
                outcome["a"] = exc
        return real(*args, **kwargs)

    write = dict(source="daily", role=Role.DERIVED, mode="replace")
    runtime.write(TABLE, rows("d0", 5), partition="d0@z", **write)  # another partition, left alone
    monkeypatch.setattr(facade, "supersede", racing)
    try:
        outcome["a_write"] = runtime.write(TABLE, rows("d1", 20), partition="d1@a", **write)
    except Exception as exc:
        outcome["a_write"] = exc
    assert len(calls) == 2, "both runs must have reached their replace step"
    return outcome


@pytest.mark.parametrize("order", ["b_first", "a_first"])
def test_two_racing_replaces_end_with_the_newer_runs_rows_and_the_older_fails_naming_it(
    runtime: ZerobusRuntime, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """Before the order, each replace deleted every other run: the partition ended empty (both
    deleted), or with the older run's rows while the newer one timed out waiting for its deleted rows."""
    from zerobus_orchestration.errors import RunSupersededError

    outcome = _interleaved(runtime, monkeypatch, order)

    b, a = outcome["b"], outcome["a_write"]
    assert not isinstance(b, Exception), b
    assert b.superseded_sources == ("daily[d1@a]",), "the newer run deletes the older one"
    assert isinstance(a, RunSupersededError), a
    assert a.winner == "daily[d1@b]" and "superseded by the newer run 'daily[d1@b]'" in str(a)
    assert a.deleted_own is (order == "b_first"), "b deleted a's rows before a decided"
    assert tags_in_table(runtime) == {"daily[d1@b]": 30, "daily[d0@z]": 5}
    assert runtime.covered(TABLE, source="daily", partition="d1@a") == ()
    assert b.run_order_version is not None
