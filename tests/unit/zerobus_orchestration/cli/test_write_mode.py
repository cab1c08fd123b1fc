"""``ingest``'s run naming: ``KEY@RUN`` (``auto`` and ``replace``), a new run each command unless named,
and option clashes refused with the fix."""

from __future__ import annotations

import pytest

from zerobus_orchestration.cli.write_mode import write_partition
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.write_modes import WriteMode, logical_partition

REPLACE, APPEND, AUTO = WriteMode.REPLACE, WriteMode.APPEND, WriteMode.AUTO


def test_append_keeps_the_partition_as_given() -> None:
    assert write_partition(APPEND, "d1", None, table="t", source=None) == "d1"


def test_replace_writes_a_new_run_of_the_logical_partition_each_time() -> None:
    first = write_partition(REPLACE, "d1", None, table="t", source="s")
    second = write_partition(REPLACE, "", "d1", table="t", source="s")
    assert logical_partition(first) == logical_partition(second) == "d1" and first != second
    whole = write_partition(REPLACE, "", None, table="t", source="s")
    assert logical_partition(whole) == ""  # no partition: the whole table's earlier runs


def test_auto_runs_a_named_partition_and_leaves_an_unnamed_write_as_it_is() -> None:
    first = write_partition(AUTO, "d1", None, table="t", source=None)  # the source may be the file names
    assert logical_partition(first) == "d1" and first.startswith("d1@cli-")
    assert write_partition(AUTO, "", None, table="t", source=None) == ""  # resumes by source, as ever
    assert write_partition(AUTO, "d1@r2", None, table="t", source=None) == "d1@r2"


def test_a_named_run_is_kept_so_the_same_command_resumes() -> None:
    assert write_partition(REPLACE, "d1@r2", "d1", table="t", source="s") == "d1@r2"
    assert write_partition(REPLACE, "d1@r2", None, table="t", source="s") == "d1@r2"


@pytest.mark.parametrize(
    ("mode", "partition", "key", "source", "fix"),
    [
        (APPEND, "d1", "d1", "s", "drop --mode append, or drop --replace-key"),
        (REPLACE, "d1", None, None, "pass --source with the same value every run"),
        (REPLACE, "d1@r2", "d2", "s", "pass --partition 'd2@<run>'"),
        (REPLACE, "d1", "d2", "s", "pass only one of them"),
    ],
)
def test_clashing_options_are_refused_naming_the_fix(
    mode: WriteMode, partition: str, key: str | None, source: str | None, fix: str
) -> None:
    with pytest.raises(ConfigError, match=r"^table main\.d\.t: ") as info:
        write_partition(mode, partition, key, table="main.d.t", source=source)
    assert f"fix: {fix}" in str(info.value)
