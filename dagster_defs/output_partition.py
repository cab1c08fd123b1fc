"""Where an asset output's write lands: its coverage partition and the partition label it replaces.

The formats are ``naming.py``'s (``"<partition key or ''>@<root run id>"``, a recovery run's tagged
original); this reads them off an ``OutputContext``. A run over a partition range writes one coverage
partition labelled ``first...last``, which ``write_mode='replace'`` cannot use: refused before any row
is sent (docs/adr/0007-write-modes.md).
"""

import datetime as dt
from collections.abc import Sequence

import dagster as dg

from dagster_defs.naming import RESUME_PARTITION_TAG, RESUME_SOURCE_TAG, partition_for, write_partition


def partition_label(context: dg.OutputContext) -> str | None:
    """The output's partition key, ``first...last`` for a range; None for an unpartitioned asset."""
    if not context.has_asset_partitions:
        return None
    keys = list(context.asset_partition_keys)
    if len(keys) == 1:
        return keys[0]
    return _range_label(context, keys)  # a single-run backfill of a range writes one coverage partition


def coverage_partition(context: dg.OutputContext, source: str) -> str:
    """The write's coverage partition (``naming.write_partition``), from the run this step belongs to."""
    label = partition_label(context)
    try:
        run = context.step_context.dagster_run
    except dg.DagsterInvariantViolationError:
        # A context built outside a run (build_output_context in a test): no run group to resume.
        return partition_for(context.run_id, label)
    partition = write_partition(run, source, label)
    tagged = run.tags.get(RESUME_PARTITION_TAG)
    if tagged and run.tags.get(RESUME_SOURCE_TAG) == source and partition != tagged:
        context.log.warning(
            f"recovery run tags ask to resume coverage partition {tagged!r}, which is not this write's "
            f"partition key {label or ''!r}; writing under {partition!r} (rows are appended again)"
        )
    return partition


def is_range_run(context: dg.OutputContext) -> bool:
    """Whether the output covers several partitions (a single-run backfill of a range)."""
    return context.has_asset_partitions and len(list(context.asset_partition_keys)) > 1


def refuse_range_replace(context: dg.OutputContext, key: dg.AssetKey, table: str) -> None:
    """A run over a partition range writes one coverage partition ``first...last``, whose replace could
    not supersede the single-partition runs inside it (nor they it): refused before anything is sent."""
    keys = list(context.asset_partition_keys) if context.has_asset_partitions else []
    if len(keys) <= 1:
        return
    span = _range_label(context, keys)
    raise dg.Failure(
        description=f"asset {key.to_user_string()} (table {table}): write_mode='replace' replaces one "
        f"partition per run, but this run covers the partition range {span} ({len(keys)} partitions); "
        "nothing was sent. Fix: run one partition per run (a backfill of this asset with "
        "backfill_policy=dg.BackfillPolicy.multi_run(1), or `dg launch --partition <key>` per "
        "partition), or keep write_mode='append' for range runs",
        metadata={"table": table, "partition_range": span},
        allow_retries=False,
    )


def _range_label(context: dg.OutputContext, keys: Sequence[str]) -> str:
    """``first...last`` of a range run. ``asset_partition_keys`` of a static partitions subset is a set
    in no fixed order, so its ends would differ between a run and its re-execution; the key range is
    the definition's order. An output spanning several ranges has none: its sorted ends, still stable."""
    try:
        span = context.asset_partition_key_range
    except Exception:  # Dagster fails a subset of several ranges with its internal CheckError
        return f"{min(keys)}...{max(keys)}"
    return f"{span.start}...{span.end}"


def attempts_began(context: dg.OutputContext, source: str) -> dt.datetime | None:
    """When the run group this write belongs to was created: no attempt of its coverage partition began
    earlier, so a resume reads only the table's files of rows stamped since (``ZerobusRuntime.write``'s
    ``not_before``). The root run's record, kept by the instance every step shares, so a retry on
    another host gets the same bound. None when a recovery run resumes another run's partition (that run
    began earlier) or outside a run: every file is read then."""
    try:
        run = context.step_context.dagster_run
        instance = context.step_context.instance
    except dg.DagsterInvariantViolationError:
        return None
    if run.tags.get(RESUME_PARTITION_TAG) and run.tags.get(RESUME_SOURCE_TAG) == source:
        return None
    record = instance.get_run_record_by_id(run.root_run_id or run.run_id)
    created = None if record is None else record.create_timestamp
    return None if created is None else created.astimezone(dt.UTC)
