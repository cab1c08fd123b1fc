"""Which run of a ``replace``-mode upstream an input reads: the one its latest materialisation names.

A ``replace`` write appends its run's rows under their own ``_twg_source`` tag and deletes the other
runs of the partition only once its rows are durable and visible (docs/adr/0007-write-modes.md). Dagster
records the materialisation only after ``handle_output`` returned, that is after that delete, so the
latest materialisation of an (asset, partition) names exactly the latest *complete* run. An input keeps,
per logical partition, only the rows of that run: while a newer run is half-written, or before its
delete commits, a downstream reads the previous complete run once instead of both.

A logical partition with no materialisation in this Dagster instance (rows written outside it) keeps
every run's rows, with a warning: there is no record of which run is complete.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from dagster_defs.metadata import KEY_PARTITION, KEY_SOURCE, KEY_SOURCE_TAG, metadata_value
from zerobus_orchestration.reserved import SOURCE as SOURCE_COLUMN
from zerobus_orchestration.write_modes import logical_partition, partition_of_tag, source_tag

UNPARTITIONED = ""  # the logical partition of an unpartitioned asset's runs


@dataclass(frozen=True)
class Selection:
    """The rows an input keeps, and the logical partitions it could not select a run for."""

    table: pa.Table
    dropped_tags: tuple[str, ...]
    unrecorded: tuple[str, ...]


def latest_tags(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: Sequence[str] | None
) -> dict[str, str]:
    """``{logical partition: _twg_source tag}`` of the latest materialisation of each partition of ``key``
    (``partitions=None``: the unpartitioned asset). Partitions never materialised here are absent."""
    if partitions is None:
        event = instance.get_latest_materialization_event(key)
        meta = event.asset_materialization.metadata if event and event.asset_materialization else None
        tag = _tag_of(meta) if meta is not None else None
        return {UNPARTITIONED: tag} if tag else {}
    latest = instance.get_latest_storage_id_by_partition(
        key, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=set(partitions)
    )
    if not latest:
        return {}
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, storage_ids=list(latest.values())), limit=len(latest)
    ).records
    tags: dict[str, str] = {}
    for record in records:
        materialization = record.asset_materialization
        tag = _tag_of(materialization.metadata) if materialization else None
        if tag and record.partition_key is not None:
            tags[record.partition_key] = tag
    return tags


def _tag_of(metadata: Mapping[str, object]) -> str | None:
    """The write's ``_twg_source`` tag; older materialisations carry only its source and partition."""
    tag = metadata_value(metadata, KEY_SOURCE_TAG)
    if tag:
        return str(tag)
    source = metadata_value(metadata, KEY_SOURCE)
    partition = metadata_value(metadata, KEY_PARTITION)
    return source_tag(str(source), str(partition or "")) if source else None


def select_latest_runs(
    table: pa.Table, source: str, recorded: Mapping[str, str], wanted: Collection[str] | None = None
) -> Selection:
    """Keep, of ``source``'s runs, only the recorded run of each logical partition; other sources' rows
    and partitions without a record are kept. ``unrecorded`` lists those of ``wanted`` (the partitions
    the input reads; ``None``: all), so partitions the input filters out later are not reported."""
    if SOURCE_COLUMN not in table.column_names:
        return Selection(table, (), ())
    dropped: list[str] = []
    unrecorded: set[str] = set()
    for tag in pc.unique(table[SOURCE_COLUMN]).to_pylist():
        partition = partition_of_tag(tag, source) if tag is not None else None
        if partition is None:
            continue  # another writer's rows: not a run of this asset
        logical = logical_partition(partition)
        if logical not in recorded:
            if wanted is None or logical in wanted:
                unrecorded.add(logical)
        elif tag != recorded[logical]:
            dropped.append(tag)
    if dropped:
        drop = pa.array(dropped, type=table.schema.field(SOURCE_COLUMN).type)
        table = table.filter(pc.invert(pc.is_in(table[SOURCE_COLUMN], value_set=drop)))
    return Selection(table, tuple(sorted(dropped)), tuple(sorted(unrecorded)))
