"""A warehouse written by the release before the wire contract resumes and verifies with this code.

The fixture (``tests/fixtures/upgrade-97f595f.tar.gz``, made by ``tests/support/upgrade_fixture.py``
run with that release) holds a first try that stopped after 600 of 1,000 rows: the Delta table the old
sink filled sending ``utf8``, native ``decimal128``, list items ``element`` and maps of ``key``/``value``,
and its coverage with the content digests the old ack lane recorded. The digest hashes the caller's rows
as given (``coverage/digest.py``), not the wire form, so what the old release recorded must still match
the same input read by this one: a re-run skips everything, the rest of the input resumes after it, a
changed input is still refused, and read-back through Iceberg finds every row once, with the exact
values, on a schema with strings, 38-digit and negative decimals, binary, lists, maps, structs and
timestamps. Everything is real: the embedded runtime, the official SDK, the emulator, Delta, pyiceberg.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from tests.support.runtime_helpers import fast_config
from tests.support.upgrade_fixture import (
    BATCH_ROWS,
    FIRST_TRY,
    PARTITION,
    RELEASE,
    ROWS,
    SOURCE,
    TABLE,
    orders,
)
from zerobus_orchestration.coverage.digest import ALGORITHM
from zerobus_orchestration.errors import ResumeMismatchError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID, ZerobusRuntime, source_tag
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri

ARCHIVE = Path(__file__).resolve().parents[2] / "fixtures" / f"upgrade-{RELEASE}.tar.gz"
KEY = CoverageKey(DEFAULT_SINK_ID, source_tag(SOURCE, PARTITION), PARTITION)


@pytest.fixture
def old_warehouse(tmp_path: Path) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "warehouse"


@pytest.fixture
def runtime(old_warehouse: Path) -> Iterator[ZerobusRuntime]:
    rt = acquire_runtime(fast_config(old_warehouse))
    try:
        yield rt
    finally:
        close_all_runtimes()


def delta_rows(rt: ZerobusRuntime) -> pa.Table:
    rt.delta_version(TABLE)  # everything acknowledged committed
    table = DeltaTable(table_uri(rt.config.warehouse, TABLE)).to_pyarrow_table()
    return table.sort_by("order_id")


def payload(table: pa.Table) -> pa.Table:
    return table.select(orders(0, 1).column_names)


def test_the_old_releases_coverage_and_digests_are_read_as_they_were_written(runtime: ZerobusRuntime) -> None:
    store = runtime.coverage(TABLE)
    assert store.ranges(KEY) == (OffsetRange(0, FIRST_TRY),)
    digests = store.digests(KEY)
    assert [d.span for d in digests] == [
        OffsetRange(s, s + BATCH_ROWS) for s in range(0, FIRST_TRY, BATCH_ROWS)
    ]
    assert {d.algorithm for d in digests} == {ALGORITHM}  # the old release's digests, still this algorithm
    old = delta_rows(runtime)
    assert old.num_rows == FIRST_TRY
    assert payload(old).equals(orders(0, FIRST_TRY))  # the old sink's rows, value for value


def test_a_rerun_of_the_same_input_skips_everything(runtime: ZerobusRuntime) -> None:
    version = DeltaTable(table_uri(runtime.config.warehouse, TABLE)).version()
    # Batched differently from the first try: digests are canonical over rows, not batches.
    same = orders(0, FIRST_TRY).to_reader(max_chunksize=97)
    result = runtime.write(TABLE, same, source=SOURCE, partition=PARTITION)
    assert (result.rows_written, result.rows_skipped) == (0, FIRST_TRY)
    assert DeltaTable(table_uri(runtime.config.warehouse, TABLE)).version() == version  # nothing sent


def test_the_rest_resumes_after_the_old_releases_rows_and_read_back_verifies(runtime: ZerobusRuntime) -> None:
    full = orders(0, ROWS)
    result = runtime.write(TABLE, full.to_reader(max_chunksize=256), source=SOURCE, partition=PARTITION)
    assert (result.rows_written, result.rows_skipped) == (ROWS - FIRST_TRY, FIRST_TRY)
    landed = delta_rows(runtime)
    assert landed.num_rows == ROWS and len(pc.unique(landed.column("order_id"))) == ROWS
    # Old rows (sent as utf8 / decimal128 / element / key-value) and new ones (the wire schema) hold the
    # same values: the input, exactly.
    assert payload(landed).equals(full)
    outcome = runtime.verify(TABLE, source=SOURCE, partition=PARTITION)
    assert outcome.verified, outcome.message
    assert outcome.rows_scanned == ROWS and outcome.missing_ranges == []
    assert runtime.coverage(TABLE).ranges(KEY) == (OffsetRange(0, ROWS),)
    # And the digests this code recorded for the rest match the same input as the old release's do.
    again = runtime.write(TABLE, full, source=SOURCE, partition=PARTITION)
    assert (again.rows_written, again.rows_skipped) == (0, ROWS)


def test_an_input_that_changed_at_the_old_releases_positions_is_still_refused(
    runtime: ZerobusRuntime,
) -> None:
    # The digests the old release recorded are checked, not skipped: one decimal changed in row 200.
    full = orders(0, ROWS)
    amounts = full.column("amount").to_pylist()
    amounts[200] = None if amounts[200] is not None else amounts[201]
    changed = full.set_column(
        2, full.schema.field("amount"), pa.array(amounts, full.schema.field("amount").type)
    )
    version = DeltaTable(table_uri(runtime.config.warehouse, TABLE)).version()
    with pytest.raises(ResumeMismatchError, match=r"\[150, 300\)"):
        runtime.write(TABLE, changed, source=SOURCE, partition=PARTITION)
    assert DeltaTable(table_uri(runtime.config.warehouse, TABLE)).version() == version  # nothing sent
