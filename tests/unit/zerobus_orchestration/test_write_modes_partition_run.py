"""The partition model every adapter maps onto, and how a write mode resolves for a table's role."""

from __future__ import annotations

import pytest

from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.write_modes import PartitionRun, Rerun, WriteMode, replaces_runs, rerun_policy


@pytest.mark.parametrize(
    ("partition", "key", "run", "revision"),
    [
        ("2026-11-01@run-1", "2026-11-01", "run-1", 1),
        (
            "2026-11-01/-1@manual__2026-11-01T00:00:00+00:00#2",
            "2026-11-01/-1",
            "manual__2026-11-01T00:00:00+00:00",
            2,
        ),
        ("@3f2a", "", "3f2a", 1),  # an unpartitioned Dagster asset
        ("d1@run#1", "d1", "run#1", 1),  # "#1" is no revision: revision 1 is unmarked
        ("d1@run#02", "d1", "run#02", 1),  # nor a number that does not round-trip
        ("d1", "d1", None, 1),  # a write that names no run
    ],
)
def test_partitions_parse_into_runs_and_back(
    partition: str, key: str, run: str | None, revision: int
) -> None:
    parsed = PartitionRun.of("daily", partition)
    assert (parsed.key, parsed.run, parsed.revision) == (key, run, revision)
    assert parsed.partition == partition and parsed.tag == f"daily[{partition}]"
    assert PartitionRun.of_tag(parsed.tag, "daily") == parsed
    assert PartitionRun.of_tag(parsed.tag, "weekly") is None


def test_revisions_belong_to_their_run() -> None:
    run = PartitionRun.of("daily", "d1@r")
    second = run.revised(2)
    assert second.partition == "d1@r#2" and run.same_run(second) and second.same_run(run)
    assert not run.same_run(PartitionRun.of("daily", "d1@other"))
    with pytest.raises(ConfigError, match="names no run"):
        PartitionRun.of("daily", "d1").revised(2)


@pytest.mark.parametrize(
    ("mode", "role", "allow", "named", "policy"),
    [
        (WriteMode.AUTO, Role.DERIVED, False, True, Rerun.REPLACE),
        (WriteMode.AUTO, Role.PRIMARY_RAW, False, True, Rerun.MATCH),
        (WriteMode.AUTO, Role.PRIMARY_RAW, True, True, Rerun.REPLACE),
        (WriteMode.AUTO, Role.DERIVED, False, False, Rerun.KEEP),  # no run named: resumes, as ever
        (WriteMode.REPLACE, Role.DERIVED, False, True, Rerun.REPLACE),
        (WriteMode.REPLACE, Role.PRIMARY_RAW, True, True, Rerun.REPLACE),
        (WriteMode.APPEND, Role.PRIMARY_RAW, True, True, Rerun.KEEP),
    ],
)
def test_a_mode_resolves_for_the_tables_role(
    mode: WriteMode, role: Role, allow: bool, named: bool, policy: Rerun
) -> None:
    assert rerun_policy(mode, role, table="main.t.t", named=named, allow_raw_replace=allow) is policy
    assert replaces_runs(mode, role, allow_raw_replace=allow) is (
        policy is Rerun.REPLACE or (not named and mode is WriteMode.AUTO and role is Role.DERIVED)
    )


def test_replace_on_primary_raw_without_the_opt_in_names_every_way_out() -> None:
    with pytest.raises(ConfigError) as refused:
        rerun_policy(WriteMode.REPLACE, Role.PRIMARY_RAW, table="main.raw.t", named=True)
    text = str(refused.value)
    for choice in ("write_mode='auto'", "role='derived'", "allow_raw_replace=True", "--allow-raw-replace"):
        assert choice in text, text
