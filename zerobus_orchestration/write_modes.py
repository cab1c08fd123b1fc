"""Write modes and a partition's lifecycle: the values every adapter maps its context onto.

Values only; the order of runs is read from the table by ``coverage/run_order.py``, what a write does
about its partition's earlier runs is decided by ``runtime/lifecycle.py`` and the replace step itself is
``runtime/supersede.py`` (docs/adr/0007-write-modes.md).

A *logical partition* of a source (Dagster: asset key and partition key, ``""`` for an unpartitioned
asset; Airflow: dag and task, then the explicit partition, else the logical date, with the map index;
CLI and Python: ``partition=``) is written by *runs*. A run's coverage partition is
``"<logical partition>@<run>"`` (Dagster: the root run id; Airflow: the DAG run id; CLI: one per
command), and ``"#<n>"`` after the run names its n-th revision: the same run re-executed with other
content (an Airflow task cleared after its input was corrected). ``PartitionRun`` is that identity; the
logical partition is what precedes the last ``@``, and a partition without ``@`` is its own (a write
that names no run: each write of it resumes the last).

What a re-run does is the write mode's (``rerun_policy``): ``append`` keeps every run's rows;
``replace`` supersedes the partition's older runs once its own rows are visible (``runtime/supersede.py``);
``auto``, the default, replaces on a derived table and, on primary raw, takes a re-run only when its
input holds what the table already has (then it is a no-op, or delivers only rows past the earlier
run's). In ``auto`` and ``replace`` a re-run whose input is what the table holds sends nothing
(``runtime/lifecycle.py`` decides before anything is sent).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError

RUN_SEPARATOR = "@"
REVISION_SEPARATOR = "#"


class WriteMode(StrEnum):
    AUTO = "auto"
    APPEND = "append"
    REPLACE = "replace"

    @classmethod
    def parse(cls, value: str | WriteMode, *, where: str) -> WriteMode:
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(
                f"{where}: write mode {value!r} is not one of {[m.value for m in cls]}; fix: set "
                "write_mode to 'auto' (the default), 'append' or 'replace'"
            ) from None


@dataclass(frozen=True)
class PartitionRun:
    """One run of a logical partition of a source: the identity every adapter maps its context onto.

    ``key``: the logical partition (``""``: the whole table); ``run``: the run's id, None when the write
    names none (a partition without ``@``); ``revision``: 1, or n when the run was re-executed with other
    content the n-th time (``#<n>`` after the run). The coverage partition is ``partition``, the rows'
    ``_twg_source`` is ``tag``.
    """

    source: str
    key: str
    run: str | None
    revision: int = 1

    @classmethod
    def of(cls, source: str, partition: str) -> PartitionRun:
        """The run a write of ``(source, partition)`` is: ``"key@run#n"`` -> key, run, revision n."""
        key, sep, run = partition.rpartition(RUN_SEPARATOR)
        if not sep:
            return cls(source, partition, None)
        base, mark, number = run.rpartition(REVISION_SEPARATOR)
        if mark and number.isdigit() and int(number) >= 2 and str(int(number)) == number:
            return cls(source, key, base, int(number))
        return cls(source, key, run)

    @classmethod
    def of_tag(cls, tag: str, source: str) -> PartitionRun | None:
        """The run a ``_twg_source`` tag of ``source`` names; None for another source's tag."""
        partition = partition_of_tag(tag, source)
        return None if partition is None else cls.of(source, partition)

    @property
    def named(self) -> bool:
        return self.run is not None

    @property
    def partition(self) -> str:
        if self.run is None:
            return self.key
        revision = f"{REVISION_SEPARATOR}{self.revision}" if self.revision > 1 else ""
        return f"{self.key}{RUN_SEPARATOR}{self.run}{revision}"

    @property
    def tag(self) -> str:
        return source_tag(self.source, self.partition)

    def revised(self, revision: int) -> PartitionRun:
        """Revision ``revision`` of this run (a named run only: an unnamed one has no run to revise)."""
        if self.run is None:
            raise ConfigError(f"partition {self.key!r} names no run ('key@run'), so it has no revisions")
        return PartitionRun(self.source, self.key, self.run, revision)

    def same_run(self, other: PartitionRun) -> bool:
        """Whether ``other`` is this run, in any revision."""
        return (other.source, other.key, other.run) == (self.source, self.key, self.run)


class Rerun(StrEnum):
    """What a write does about its logical partition's other runs: its write mode, resolved."""

    KEEP = "keep"
    """``append``: every run's rows stay; nothing is compared or deleted."""
    REPLACE = "replace"
    """A re-run with the content the table holds is a no-op; any other supersedes the older runs."""
    MATCH = "match"
    """Primary raw under ``auto``: a re-run with the content the table holds is a no-op, any other is
    refused before anything is sent."""


def rerun_policy(
    mode: WriteMode, role: Role, *, table: str, named: bool, allow_raw_replace: bool = False
) -> Rerun:
    """How a write in ``mode`` to a ``role`` table treats its partition's other runs; a ``replace`` of
    primary raw without ``allow_raw_replace`` is refused here, before anything is sent."""
    if mode is WriteMode.APPEND:
        return Rerun.KEEP
    if mode is WriteMode.REPLACE:
        if role is Role.PRIMARY_RAW and not allow_raw_replace:
            refuse_on_primary_raw(table, role)
        return Rerun.REPLACE
    if not named:  # a write that names no run resumes its partition's last write: nothing to compare
        return Rerun.KEEP
    if role is Role.PRIMARY_RAW and not allow_raw_replace:
        return Rerun.MATCH
    return Rerun.REPLACE


def replaces_runs(mode: WriteMode, role: Role, *, allow_raw_replace: bool = False) -> bool:
    """Whether writes in ``mode`` to a ``role`` table replace their partition's older runs (readers of such
    a table read one run per partition); never raises, unlike ``rerun_policy``."""
    if mode is WriteMode.APPEND:
        return False
    return role is not Role.PRIMARY_RAW or allow_raw_replace


def logical_partition(partition: str) -> str:
    """``"2024-01-01@run-1"`` -> ``"2024-01-01"``; a partition without a run part is its own."""
    head, sep, _run = partition.rpartition(RUN_SEPARATOR)
    return head if sep else partition


def source_tag(source: str, partition: str = "") -> str:
    """The ``_twg_source`` value of a write (and its coverage key's source): the source, qualified by its
    partition when it has one.

    Rows carry no partition column, so two partitions of one source must differ in ``_twg_source``
    for read-back to tell their row positions apart. A source containing ``[`` is refused: source
    ``a[b]`` would be indistinguishable from source ``a`` with partition ``b``.
    """
    if "[" in source:
        raise ConfigError(
            f"source {source!r} contains '[', which starts the partition suffix in _twg_source "
            "(source[partition]); fix: rename the source, and pass any partition as partition="
        )
    return f"{source}[{partition}]" if partition else source


def partition_of_tag(tag: str, source: str) -> str | None:
    """The partition a ``_twg_source`` tag of ``source`` carries (``source_tag``'s inverse); ``None`` for
    another source's tag."""
    if tag == source:
        return ""
    if tag.startswith(source + "[") and tag.endswith("]"):
        return tag[len(source) + 1 : -1]
    return None


def latest_run_filter(*tags: str) -> str:
    """A SQL predicate that keeps only the rows of the given runs: ``_twg_source IN ('<tag>', ...)``.

    ``tags``: the ``_twg_source`` tag a write records (the Airflow ingest's XCom ``source_tag``; one per
    map index of a mapped ingest). A ``replace`` write returns only once its rows are visible and the
    other runs of its partition are deleted, so its tag names the latest complete run of that partition;
    filtering on it reads that run once even while an older run's rows are still in the table
    (docs/adr/0007-write-modes.md). The column is unquoted, so the predicate is the same in Databricks
    SQL, DataFusion (``deltalake.QueryBuilder``) and DuckDB.
    """
    if not tags:
        raise ConfigError("latest_run_filter needs at least one _twg_source tag (the ingest's source_tag)")
    for tag in tags:
        if not tag or any(c in tag for c in "'\\\n"):
            raise ConfigError(
                f"latest_run_filter: _twg_source tag {tag!r} is empty or holds a quote, backslash or newline "
                "that a SQL literal would need escaping for; fix: pass the ingest's source_tag as recorded, "
                "and use a replace_key without those characters"
            )
    # The reserved column ``_twg_source`` (reserved.SOURCE); a value module does not import its siblings.
    return "_twg_source IN (" + ", ".join(f"'{tag}'" for tag in tags) + ")"


RAW_REPLACE_CHOICES = (
    "declare the table derived (role='derived'; Dagster metadata zerobus/role: derived; CLI --role derived), "
    "or opt in to replacing primary-raw rows (allow_raw_replace=True; Dagster metadata "
    "zerobus/allow_raw_replace: true; CLI --allow-raw-replace)"
)
"""The two ways to let a re-run replace a primary-raw partition, named by every refusal."""


def refuse_on_primary_raw(table: str, role: Role) -> None:
    if role is Role.PRIMARY_RAW:
        raise ConfigError(
            f"table {table}: write_mode='replace' deletes earlier runs' rows, and {table} is a primary_raw "
            "table, whose rows are the record every reader resumes and verifies from. Fix: keep "
            f"write_mode='auto' or 'append' for a raw table, {RAW_REPLACE_CHOICES}"
        )
