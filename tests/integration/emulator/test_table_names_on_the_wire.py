"""The emulator addresses tables by the dotted name the official SDK sends, parsed as ``TableName`` parses
it: folded to lower case, hostile spellings refused, unstorable names refused at once (issue 12 items 4,
5 and 9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from zerobus.sdk.shared import NonRetriableException

from tests.support.emulator_helpers import SCHEMA, TABLE, create_table, events, open_arrow, read_table
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration


def test_a_case_variant_of_the_name_streams_into_the_one_table(emulator: Emulator, warehouse: Path) -> None:
    stream = open_arrow(emulator, "MAIN.Default.EVENTS", SCHEMA)
    stream.ingest_batch(events([1, 2, 3]))
    stream.flush()
    stream.close()
    emulator.materialize_now(TABLE)
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2, 3]
    wal_dirs = [p.name for p in emulator.wal_root.iterdir() if p.is_dir()]
    assert wal_dirs == [TABLE]  # one write-ahead log, under the folded name


@pytest.mark.parametrize("hostile", ["main.default.```events```", "main.default.`ev``ents`"])
def test_a_backticked_hostile_name_is_refused_not_routed_to_another_table(
    emulator: Emulator, warehouse: Path, hostile: str
) -> None:
    with pytest.raises(NonRetriableException, match="ASCII letters, digits and underscores"):
        open_arrow(emulator, hostile, SCHEMA)
    assert read_table(warehouse).num_rows == 0
    assert emulator.streams_opened(TABLE) == 0


def test_a_name_whose_wal_folder_cannot_exist_is_refused_at_once(emulator: Emulator, warehouse: Path) -> None:
    long_name = "main.default." + "t" * 255  # its Delta folder can exist, its WAL folder cannot
    create_table(warehouse, long_name)
    with pytest.raises(NonRetriableException, match="at most 255 bytes"):
        open_arrow(emulator, long_name, SCHEMA)
