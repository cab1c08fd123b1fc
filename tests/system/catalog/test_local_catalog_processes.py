"""The local catalog (``catalog.local.LocalCatalog``) against other processes: real delta-rs and SQLite.

Two processes creating one table at once both succeed with every column kept, and the Delta handle a
catalog keeps per table (delta_handles) sees what another process committed. Processes, so system tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from zerobus_orchestration.catalog.local import LocalCatalog

T = "main.raw.events"
KEPT = "main.raw.kept"


_RACER = """
import sys
import pyarrow as pa
from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role

schema = pa.schema([pa.field("id", pa.int64()), pa.field(sys.argv[2], pa.string())])
out = LocalCatalog(sys.argv[1]).reconcile(
    "main.raw.events", DesiredTable.build("main.raw.events", schema, Role.PRIMARY_RAW, subset=True)
)
print(out.plan.to_json())
"""


def test_concurrent_reconciles_from_two_processes_both_succeed(tmp_path: Path) -> None:
    # Separate processes: delta-rs may fail the losing commit, and caught delta-rs errors can abort a
    # process (docs/architecture.md#delta-rs), so the race runs outside the test process. Both
    # processes create the table: delta-rs used to rebase the losing CREATE onto version 1, replacing
    # the winner's schema (one column lost, both exiting 0, about one race in three), so it runs a few
    # times.
    for race in range(3):
        wh = str(tmp_path / f"wh{race}")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _RACER, wh, column], stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for column in ("a", "b")
        ]
        results = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], results
        state = LocalCatalog(wh).describe(T)
        assert state is not None and {"id", "a", "b"} <= {c.name for c in state.columns}, (race, results)
        assert state.registered


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    catalog = LocalCatalog(tmp_path / "wh")
    write_deltalake(catalog.location(KEPT), _rows(1))  # made outside the catalog: described all the same
    return catalog


def _rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "name": pa.array(["x"] * n)})


def test_changes_from_another_process_are_seen(catalog: LocalCatalog) -> None:
    before = catalog.describe(KEPT)
    assert before is not None and before.version is not None
    script = (
        "import sys, pyarrow as pa; from deltalake import DeltaTable, write_deltalake\n"
        "t = pa.table({'id': pa.array([1], pa.int64()), 'name': ['a'], 'added': pa.array([2.5])})\n"
        "write_deltalake(sys.argv[1], t, mode='append', schema_mode='merge')\n"
        "DeltaTable(sys.argv[1]).alter.set_table_properties({'delta.appendOnly': 'true'})\n"
    )
    subprocess.run([sys.executable, "-c", script, catalog.location(KEPT)], check=True, timeout=120)
    after = catalog.describe(KEPT)
    assert after is not None
    assert after.version == before.version + 2
    assert [c.name for c in after.columns] == [*[c.name for c in before.columns], "added"]
    assert after.properties.get("delta.appendOnly") == "true"
