"""``select_latest_runs``: which rows of a ``replace`` asset an input keeps (the orchestrated proof is
tests/system/dagster/test_dagster_replace_readers.py)."""

import pyarrow as pa

from dagster_defs.latest_run import select_latest_runs


def _rows(tags: list[str | None]) -> pa.Table:
    return pa.table({"n": pa.array(range(len(tags)), pa.int64()), "_twg_source": pa.array(tags, pa.string())})


def test_keeps_the_recorded_run_of_each_partition_and_drops_the_others() -> None:
    table = _rows(["s[a@1]", "s[a@2]", "s[a@2]", "s[b@1]", "s[b@3]"])
    chosen = select_latest_runs(table, "s", {"a": "s[a@1]", "b": "s[b@3]"})
    assert chosen.table["_twg_source"].to_pylist() == ["s[a@1]", "s[b@3]"]
    assert chosen.dropped_tags == ("s[a@2]", "s[b@1]")
    assert chosen.unrecorded == ()


def test_keeps_other_sources_unrecorded_partitions_and_untagged_rows() -> None:
    table = _rows(["other[a@9]", "s[a@1]", "s[c@1]", "s[c@2]", None, "s[@5]"])
    chosen = select_latest_runs(table, "s", {"a": "s[a@1]"})
    assert chosen.table["_twg_source"].to_pylist() == [
        "other[a@9]",
        "s[a@1]",
        "s[c@1]",
        "s[c@2]",
        None,
        "s[@5]",
    ]
    assert chosen.unrecorded == ("", "c")


def test_only_the_partitions_the_input_reads_are_reported_unrecorded() -> None:
    table = _rows(["s[a@1]", "s[b@1]", "s[c@1]"])
    chosen = select_latest_runs(table, "s", {"a": "s[a@1]"}, wanted=["a", "b"])
    assert chosen.unrecorded == ("b",)
    assert chosen.table.num_rows == 3


def test_an_unpartitioned_asset_is_the_partition_before_the_run() -> None:
    table = _rows(["s[@1]", "s[@2]"])
    assert select_latest_runs(table, "s", {"": "s[@2]"}).table["n"].to_pylist() == [1]


def test_a_table_without_the_source_column_is_returned_as_is() -> None:
    table = pa.table({"n": [1, 2]})
    assert select_latest_runs(table, "s", {"": "s[@2]"}).table is table
