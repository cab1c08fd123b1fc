"""The order of a partition's runs, read from a real Delta table's log (deltalake writes and deletes)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.coverage.run_order import ABSENT, RunHistory
from zerobus_orchestration.coverage.table_truth import TableReader

A, B, C = "daily[d1@a]", "daily[d1@b]", "daily[d1@c]"


def _append(uri: str, *tags: str) -> int:
    """One commit holding a row of each tag; returns its version."""
    write_deltalake(uri, pa.table({"_twg_source": list(tags), "v": list(range(len(tags)))}), mode="append")
    return DeltaTable(uri).version()


def _delete(uri: str, *tags: str) -> int:
    values = ", ".join(f"'{t}'" for t in tags)
    DeltaTable(uri).delete(f'"_twg_source" IN ({values})')
    return DeltaTable(uri).version()


def _history(uri: str) -> RunHistory:
    return RunHistory(TableReader("main.d.t", uri, {}), source="daily", key="d1")


def test_births_are_the_versions_a_runs_rows_appeared_at_and_ties_go_to_the_greater_tag(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    first = _append(uri, "daily[d0@x]", "other[d1@a]", "daily[d10@a]")  # not runs of daily/d1
    born_a = _append(uri, A)
    _append(uri, A)
    born_bc = _append(uri, B, C)
    history = _history(uri)

    assert history.live() == {A, B, C}, "other sources and partitions with the same prefix are not runs"
    assert history.present_at(first) == frozenset()
    assert history.birth(A, hi=history.latest()) == born_a
    assert history.birth(B, hi=history.latest(), lo=born_a) == born_bc
    assert history.older(A, than=B, born=born_bc, since=ABSENT)
    assert not history.older(B, than=A, born=born_a, since=ABSENT)
    # Born in the same commit: the greater tag is the newer, the same answer from either side.
    assert history.older(B, than=C, born=born_bc, since=ABSENT)
    assert not history.older(C, than=B, born=born_bc, since=ABSENT)
    assert history.newest([B, C], after=born_a) == C


def test_a_run_deleted_while_still_writing_stays_the_older_one(tmp_path: Path) -> None:
    """``a`` was writing when ``b`` deleted it; ``a``'s last rows landed after the delete. Seen from the
    table now, ``a`` looks born after ``b``, but the delete that named it says it was there first."""
    uri = str(tmp_path / "t")
    start = _append(uri, "daily[d0@x]")
    _append(uri, A)
    born_b = _append(uri, B)
    removed = _delete(uri, A)
    tail = _append(uri, A)
    born_c = _append(uri, C)
    history = _history(uri)

    assert history.birth(A, hi=history.latest(), lo=removed) == tail  # its presence now began at the tail
    assert history.deleted_since(A, start) == removed
    assert history.deleted_since(B, start) is None
    assert history.older(A, than=B, born=born_b, since=start), "a had rows before b was born"
    assert history.older(A, than=C, born=born_c, since=start)
    assert history.older(B, than=C, born=born_c, since=start)


def test_a_removal_is_judged_by_the_rows_it_took_not_by_its_predicate_text(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    start = _append(uri, "daily[d0@x]")
    write_deltalake(uri, pa.table({"_twg_source": [A, A, B], "v": [1, 7, 7]}), mode="append")
    DeltaTable(uri).delete("v = 7")  # names no tag: takes one row of a and the row of b
    removed = DeltaTable(uri).version()
    history = _history(uri)
    assert history.removals_since(start) == (removed,)
    assert history.deleted_since(A, start) == removed and history.deleted_since(B, start) == removed
    assert history.live() == {A}
    assert history.deleted_since("daily[d1@never]", start) is None
