"""Re-materialising a partition as a user does it: ``dg launch --partition`` in fresh processes, against one
Dagster instance (``DAGSTER_HOME``) and one warehouse, each run read back from the Delta tables themselves.

A raw asset and a derived chain (a derived table computed from the same day file, and its daily totals),
all partitioned by day:

1. the day launched: every table holds the day once;
2. launched again with the same file: no table changes (same Delta versions), and every materialisation
   says ``zerobus/already_delivered`` and names the run that holds its rows;
3. the file corrected, the derived chain launched: the derived table holds exactly the corrected rows
   (the earlier run deleted), and the totals downstream match them;
4. the raw asset launched with the corrected file: refused before anything is sent, naming the choices,
   its table unchanged; launched again with ``allow_raw_replace`` it holds exactly the corrected rows.

Before the partition lifecycle, step 2 appended a second copy of the day to every table (5,000 -> 10,000
rows on the raw table) and the totals summed both.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.tables import table_uri

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DG = Path(sys.executable).parent / "dg"
DAY = "2026-11-01"
ROWS = 5_000
DEFS = """
import os

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_defs import ZerobusIOManager, ZerobusResource

DAYS = dg.DailyPartitionsDefinition(start_date="2026-11-01")
DERIVED = {"partition_expr": "day", "zerobus/role": "derived"}


def _day(context) -> pa.Table:
    return pq.read_table(os.path.join(os.environ["REPROCESS_INPUT"], f"{context.partition_key}.parquet"))


@dg.asset(key=["raw", "visits"], partitions_def=DAYS, metadata={"partition_expr": "day"})
def raw_visits(context) -> pa.Table:
    return _day(context)


@dg.asset(key=["derived", "visits"], partitions_def=DAYS, metadata=DERIVED)
def clean_visits(context) -> pa.Table:
    return _day(context)


@dg.asset(
    key=["derived", "visit_totals"], partitions_def=DAYS, ins={"visits": dg.AssetIn(["derived", "visits"])},
    metadata=DERIVED,
)
def visit_totals(context, visits: pa.Table) -> pa.Table:
    return pa.table({"day": [context.partition_key], "visits": [visits.num_rows],
                     "seconds": [pc.sum(visits["seconds"]).as_py()]})


zerobus = ZerobusResource()
defs = dg.Definitions(
    assets=[raw_visits, clean_visits, visit_totals],
    resources={
        "zerobus": zerobus,
        "io_manager": ZerobusIOManager(
            zerobus=zerobus, allow_raw_replace=os.environ.get("ALLOW_RAW_REPLACE") == "1"
        ),
    },
)
"""
TABLES = ("main.raw.visits", "main.derived.visits", "main.derived.visit_totals")


def _day_file(folder: Path, seconds: list[int]) -> None:
    pq.write_table(
        pa.table(
            {
                "day": [DAY] * len(seconds),
                "visit": pa.array(range(len(seconds)), pa.int64()),
                "seconds": pa.array(seconds, pa.int64()),
            }
        ),
        folder / f"{DAY}.parquet",
    )


def _launch(tmp_path: Path, assets: str, **extra: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "dagster_home"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        DAGSTER_HOME=str(home),
        PYTHONPATH=str(tmp_path / "code"),
        ZEROBUS_WAREHOUSE=str(tmp_path / "warehouse"),
        ZEROBUS_EMULATOR__MODE="in_process",  # the run's process owns the emulator, then exits
        ZEROBUS_EMULATOR__ICEBERG_LAG_S="0.3",
        ZEROBUS_EMULATOR__TIME_TO_TABLE_S="0.2",
        REPROCESS_INPUT=str(tmp_path / "input"),
        **extra,
    )
    command = [str(DG), "launch", "-m", "reprocess_defs", "--assets", assets, "--partition", DAY]
    command += ["--config-json", json.dumps({"execution": {"config": {"in_process": {}}}})]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _table(tmp_path: Path, name: str) -> DeltaTable:
    return DeltaTable(table_uri(str(tmp_path / "warehouse"), name))


def _latest(tmp_path: Path, key: list[str]) -> dict[str, object]:
    """The metadata of the latest materialisation of ``key``'s day, as DAGSTER_HOME recorded it."""
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(key))
        assert event is not None and event.asset_materialization is not None
        return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def _latest_run_status(tmp_path: Path) -> str:
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        (latest,) = instance.get_run_records(limit=1)
        return str(latest.dagster_run.status.value)


def _tags(tmp_path: Path, name: str) -> dict[str, int]:
    rows = _table(tmp_path, name).to_pyarrow_table(columns=["_twg_source"])
    return {c["values"]: c["counts"] for c in pc.value_counts(rows["_twg_source"]).to_pylist()}


def test_launching_a_day_again_sends_nothing_and_a_corrected_day_replaces_derived_and_is_refused_on_raw(
    tmp_path: Path,
) -> None:
    assert DG.exists(), f"{DG} is missing: the dagster extra installs dagster-dg-cli"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "reprocess_defs.py").write_text(DEFS)
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (tmp_path / "input").mkdir()
    original = [i % 60 for i in range(ROWS)]
    _day_file(tmp_path / "input", original)
    everything = "raw/visits,derived/visits,derived/visit_totals"

    first = _launch(tmp_path, everything)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    loaded = {name: _tags(tmp_path, name) for name in TABLES}
    assert [sum(tags.values()) for tags in loaded.values()] == [ROWS, ROWS, 1]
    versions = {name: _table(tmp_path, name).version() for name in TABLES}

    # 2. The same day again, the same file: nothing is sent, nothing committed, and the metadata says so.
    again = _launch(tmp_path, everything)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert {name: _table(tmp_path, name).version() for name in TABLES} == versions
    assert {name: _tags(tmp_path, name) for name in TABLES} == loaded
    for key, name in zip(
        (["raw", "visits"], ["derived", "visits"], ["derived", "visit_totals"]), TABLES, strict=True
    ):
        meta = _latest(tmp_path, key)
        (held,) = loaded[name]
        assert meta["zerobus/already_delivered"] is True and meta["zerobus/delivered_by"] == held, meta
        assert meta["zerobus/rows_written"] == 0 and meta["zerobus/source_tag"] == held

    # 3. The day corrected: the derived chain replaces the day, the totals follow the corrected rows.
    corrected = [s + (1 if i % 7 == 0 else 0) for i, s in enumerate(original)][:-100]
    _day_file(tmp_path / "input", corrected)
    derived = _launch(tmp_path, "derived/visits,derived/visit_totals")
    assert derived.returncode == 0, (derived.stdout + derived.stderr)[-4000:]
    rows = _table(tmp_path, "main.derived.visits").to_pyarrow_table()
    assert len(set(rows["_twg_source"].to_pylist())) == 1, "exactly one run of the day"
    assert sorted(rows["seconds"].to_pylist()) == sorted(corrected)
    meta = _latest(tmp_path, ["derived", "visits"])
    assert meta["zerobus/superseded_runs"] == list(loaded["main.derived.visits"]), meta
    totals = _table(tmp_path, "main.derived.visit_totals").to_pyarrow_table().to_pylist()
    assert [(t["visits"], t["seconds"]) for t in totals] == [(len(corrected), sum(corrected))]

    # 4. Raw keeps its record: the corrected day is refused before anything is sent...
    raw_version = _table(tmp_path, "main.raw.visits").version()
    refused = _launch(tmp_path, "raw/visits")
    assert _latest_run_status(tmp_path) == "FAILURE"
    said = refused.stdout + refused.stderr
    assert "nothing was sent" in said and "allow_raw_replace" in said and "role='derived'" in said, said[
        -4000:
    ]
    assert _table(tmp_path, "main.raw.visits").version() == raw_version
    assert _tags(tmp_path, "main.raw.visits") == loaded["main.raw.visits"]
    # ...and replaced when opted in.
    opted = _launch(tmp_path, "raw/visits", ALLOW_RAW_REPLACE="1")
    assert opted.returncode == 0, (opted.stdout + opted.stderr)[-4000:]
    raw = _table(tmp_path, "main.raw.visits").to_pyarrow_table()
    assert len(set(raw["_twg_source"].to_pylist())) == 1
    assert sorted(raw["seconds"].to_pylist()) == sorted(corrected)
