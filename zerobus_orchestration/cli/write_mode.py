"""How ``zerobus-orch ingest`` names its run of a partition (docs/adr/0007-write-modes.md).

With ``--mode auto`` (the default) or ``replace``, a write of ``--partition KEY`` is a run of logical
partition ``KEY``, so each command writes under its own coverage partition ``KEY@RUN``: ``KEY`` is
``--replace-key`` or ``--partition``, ``RUN`` is new for every command (``cli-<UTC time>-<random>``)
unless ``--partition KEY@RUN`` names it, which makes the same command resume it. A re-run is compared
with the partition's earlier run of the same source (``--source``, else the file names), and a replace
deletes the older runs of it, so a replace needs the same ``--source`` every run. Without a partition
(``auto``) or with ``append`` the partition is used as given: each run of the same command resumes.

A replace that finds a newer run of its partition in the table fails (exit 1) naming it; with
``--json`` it first prints what it was and what superseded it (``superseded_summary``).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from zerobus_orchestration.errors import ConfigError, RunSupersededError
from zerobus_orchestration.write_modes import RUN_SEPARATOR, WriteMode, logical_partition


def new_run_id() -> str:
    return f"cli-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"


def write_partition(
    mode: WriteMode, partition: str, replace_key: str | None, *, table: str, source: str | None
) -> str:
    """The coverage partition of this CLI write; a ``ConfigError`` naming the fix for options that clash."""
    if mode is WriteMode.APPEND:
        if replace_key is not None:
            raise ConfigError(
                f"table {table}: --replace-key applies only to --mode auto or replace; fix: drop --mode "
                "append, or drop --replace-key"
            )
        return partition
    if source is None and mode is WriteMode.REPLACE:
        raise ConfigError(
            f"table {table}: --mode replace deletes the earlier runs of the same source, and without "
            "--source the source is this run's file names, which change between runs; fix: pass --source "
            "with the same value every run"
        )
    if RUN_SEPARATOR in partition:  # the caller named the run
        if replace_key is not None and logical_partition(partition) != replace_key:
            raise ConfigError(
                f"table {table}: --partition {partition!r} belongs to partition "
                f"{logical_partition(partition)!r}, not --replace-key {replace_key!r}; fix: pass "
                f"--partition '{replace_key}{RUN_SEPARATOR}<run>'"
            )
        return partition
    if replace_key is not None and partition and partition != replace_key:
        raise ConfigError(
            f"table {table}: --partition {partition!r} and --replace-key {replace_key!r} name different "
            "partitions; fix: pass only one of them"
        )
    key = partition if replace_key is None else replace_key
    if mode is WriteMode.AUTO and not key and replace_key is None:
        return ""  # no partition named: the write resumes by source, as every write of it does
    return f"{key}{RUN_SEPARATOR}{new_run_id()}"


def superseded_summary(exc: RunSupersededError, *, source: str, partition: str) -> dict[str, Any]:
    """The ``--json`` line of a replace that a newer run superseded (the error line follows on stderr)."""
    return {
        "status": "superseded",
        "table": exc.table,
        "source": source,
        "partition": partition,
        "source_tag": exc.run,
        "superseded_by": exc.winner,
        "run_order_version": exc.birth_version,
        "rows_deleted_by_newer_run": exc.deleted_own,
        "superseded_sources": list(exc.superseded),
    }
