"""Emulated UniForm's conversion: one Delta version made an Iceberg snapshot, in one commit, no threads.

The scheduling (which table, when, retries) is ``iceberg_mirror.IcebergMirror``'s; this is what it runs.
Iceberg reads the Delta Parquet files in place through a name mapping, and each converted snapshot
records ``delta-version`` and ``delta-timestamp`` in its summary (``snapshot_summary``).

Why data files are built by hand rather than with ``Table.add_files``: delta-rs names nested Parquet
fields ``list.item`` / ``entries.key``, pyiceberg's statistics mapping expects ``list.element`` /
``key_value.key`` and ``add_files`` fails with ``KeyError`` (apache/iceberg-python#716). Building the
``DataFile`` with an aliasing column mapping works for plain and nested columns alike, so there is one
code path for appends and for overwrites.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    MetricsMode,
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration.emulator.errors import MirrorError
from zerobus_orchestration.emulator.parquet_codec import parquet_codec
from zerobus_orchestration.snapshot_summary import DELTA_TIMESTAMP_KEY, DELTA_VERSION_KEY
from zerobus_orchestration.tables import TableName

log = logging.getLogger(__name__)

NAME_MAPPING_PROPERTY: Final = "schema.name-mapping.default"


# object_store (delta-rs) storage option -> pyiceberg FileIO property, for S3 warehouses.
_STORAGE_TO_ICEBERG: Final = {
    "aws_endpoint_url": "s3.endpoint",
    "aws_endpoint": "s3.endpoint",
    "endpoint_url": "s3.endpoint",
    "aws_access_key_id": "s3.access-key-id",
    "access_key_id": "s3.access-key-id",
    "aws_secret_access_key": "s3.secret-access-key",
    "secret_access_key": "s3.secret-access-key",
    "aws_session_token": "s3.session-token",
    "session_token": "s3.session-token",
    "aws_region": "s3.region",
    "region": "s3.region",
}


def iceberg_io_properties(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """pyiceberg FileIO properties equivalent to delta-rs ``storage_options`` (S3 keys and endpoint)."""
    props: dict[str, str] = {}
    for key, value in (storage_options or {}).items():
        mapped = _STORAGE_TO_ICEBERG.get(key.lower())
        if mapped is not None:
            props[mapped] = value
    return props


def delta_arrow_schema_with_docs(schema: pa.Schema) -> pa.Schema:
    """The Delta schema with each column's ``comment`` metadata copied to ``doc``, which pyiceberg reads."""
    return pa.schema([_field_with_doc(f) for f in schema], metadata=schema.metadata)


def _field_with_doc(f: pa.Field) -> pa.Field:
    dtype = f.type
    if pa.types.is_struct(dtype):
        dtype = pa.struct([_field_with_doc(dtype.field(i)) for i in range(dtype.num_fields)])
    elif pa.types.is_map(dtype):
        dtype = pa.map_(_field_with_doc(dtype.key_field), _field_with_doc(dtype.item_field))
    elif pa.types.is_large_list(dtype):
        dtype = pa.large_list(_field_with_doc(dtype.value_field))
    elif pa.types.is_list(dtype):
        dtype = pa.list_(_field_with_doc(dtype.value_field))
    metadata = dict(f.metadata or {})
    if b"comment" in metadata:
        metadata[b"doc"] = metadata[b"comment"]
    return pa.field(f.name, dtype, nullable=f.nullable, metadata=metadata or None)


def _aliased_column_mapping(mapping: Mapping[str, int]) -> dict[str, int]:
    """Parquet column path -> field id, also under delta-rs's (arrow-rs) nested names."""
    aliased = dict(mapping)
    for path, field_id in mapping.items():
        alias = path.replace(".list.element", ".list.item").replace(".key_value.", ".entries.")
        aliased.setdefault(alias, field_id)
    return aliased


def build_data_file(table: IcebergTable, file_path: str) -> DataFile:
    """An Iceberg ``DataFile`` for an existing Parquet file, with statistics mapped by column name."""
    metadata = table.metadata
    schema = metadata.schema()
    input_file = table.io.new_input(file_path)
    with input_file.open() as stream:
        parquet_metadata = pq.read_metadata(stream)
    mapping = _aliased_column_mapping(parquet_path_to_id_mapping(schema))
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=_counts_only_for_int64_decimals(
            compute_statistics_plan(schema, metadata.properties), parquet_metadata, mapping
        ),
        parquet_column_mapping=mapping,
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=file_path,
        file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), schema),
        file_size_in_bytes=len(input_file),
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


_COUNTS: Final = MetricsMode(MetricModeTypes.COUNTS)
_INT32_DECIMAL_DIGITS: Final = 9  # Iceberg's Parquet mapping: DECIMAL(p <= 9) as INT32


def _counts_only_for_int64_decimals(
    plan: dict[int, StatisticsCollector], parquet_metadata: pq.FileMetaData, mapping: Mapping[str, int]
) -> dict[int, StatisticsCollector]:
    """The statistics plan, with no bounds for a DECIMAL(1, s) column delta-rs wrote as INT64.

    The Iceberg spec stores precisions up to 9 as INT32, and pyiceberg refuses other physical types
    when it reads bounds; arrow-rs writes precision 1 (only) as INT64 (observed with deltalake 1.6).
    The values read fine either way, so such a column keeps its counts and loses only its bounds
    (readers then scan its files instead of skipping them).
    """
    int64_columns = {
        mapping[column.path]
        for column in (parquet_metadata.schema.column(i) for i in range(parquet_metadata.num_columns))
        if column.physical_type == "INT64"
        and column.logical_type.type == "DECIMAL"
        and column.precision <= _INT32_DECIMAL_DIGITS
        and column.path in mapping
    }
    narrowed = dict(plan)
    for field_id in int64_columns & plan.keys():
        collector = plan[field_id]
        if collector.mode.type in (MetricModeTypes.TRUNCATE, MetricModeTypes.FULL):
            narrowed[field_id] = StatisticsCollector(
                field_id=collector.field_id,
                iceberg_type=collector.iceberg_type,
                mode=_COUNTS,
                column_name=collector.column_name,
            )
    return narrowed


def snapshot_delta_version(table: IcebergTable) -> int:
    """The Delta version recorded in the current snapshot's summary; -1 without one."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return -1
    raw = snapshot.summary.additional_properties.get(DELTA_VERSION_KEY)
    return int(raw) if raw is not None else -1


def convert_version(
    catalog: SqlCatalog, name: TableName, dt: DeltaTable, delta_uri: str, version: int | None
) -> int:
    """Make the Iceberg table of ``name`` reflect Delta ``version`` (``None``: the latest) in one commit.

    Returns the Delta version the Iceberg table now reflects (never lower than it already did).
    ``CommitFailedException``: another writer committed first; the caller retries.
    """
    latest = dt.version()
    target = latest if version is None else min(version, latest)
    if target != latest:
        dt.load_as_version(target)
    check_convertible(name, dt)

    arrow_schema = delta_arrow_schema_with_docs(pa.schema(dt.schema().to_arrow()))
    codec = parquet_codec(dt.metadata().configuration)
    table = load_or_create(catalog, name, delta_uri, arrow_schema, codec)
    already = snapshot_delta_version(table)
    if already >= target:
        return already

    with table.update_schema() as update:  # additive evolution; also extends the name mapping
        update.union_by_name(arrow_schema)
    table = table.refresh()

    base = dt.table_uri.rstrip("/")
    timestamp = _commit_timestamp(table, base, target)
    delta_files = {_data_file_uri(base, p) for p in _add_action_paths(dt)}
    to_add, to_remove = _changes(table, dt, base, already, delta_files)
    summary = {DELTA_VERSION_KEY: str(target)}
    if timestamp is not None:
        summary[DELTA_TIMESTAMP_KEY] = str(timestamp)

    new_files = [build_data_file(table, path) for path in to_add]
    with table.transaction() as tx:
        if NAME_MAPPING_PROPERTY not in tx.table_metadata.properties:
            mapping = tx.table_metadata.schema().name_mapping
            tx.set_properties({NAME_MAPPING_PROPERTY: mapping.model_dump_json()})
        # A metadata-only Delta commit still gets a (file-less) snapshot, so the snapshot summary
        # always carries the latest converted Delta version.
        snapshot_update = tx.update_snapshot(snapshot_properties=summary)
        if to_remove:
            with snapshot_update.overwrite() as overwrite:
                for old in to_remove:
                    overwrite.delete_data_file(old)
                for new in new_files:
                    overwrite.append_data_file(new)
        else:
            with snapshot_update.fast_append() as append:
                for new in new_files:
                    append.append_data_file(new)
    log.info(
        "mirrored %s Delta version %d to Iceberg (+%d -%d files)",
        name,
        target,
        len(new_files),
        len(to_remove),
    )
    return target


def _changes(
    table: IcebergTable, dt: DeltaTable, base: str, already: int, delta_files: set[str]
) -> tuple[list[str], list[DataFile]]:
    """Data files to add to and remove from ``table`` so that it holds exactly ``delta_files``.

    Incremental when it can be: the snapshot converted from Delta version ``already`` holds exactly
    that version's files, so if Delta only added files since, the new ones are the difference of two
    add-action lists, read from the Delta log. Planning the Iceberg table instead reads every manifest,
    a cost that grows with the table's file count at every conversion. The full plan is the fallback
    (Delta removed files, that version's log is gone, or the snapshot does not match it). ``dt`` is
    left at an older version.
    """
    if table.current_snapshot() is None:
        return sorted(delta_files), []
    before = _files_converted_from(table, dt, base, already)
    if before is not None and before <= delta_files:
        return sorted(delta_files - before), []
    registered = {task.file.file_path: task.file for task in table.scan().plan_files()}
    return sorted(delta_files - registered.keys()), [
        registered[p] for p in sorted(registered.keys() - delta_files)
    ]


def _files_converted_from(table: IcebergTable, dt: DeltaTable, base: str, already: int) -> set[str] | None:
    """Delta version ``already``'s data files if the current snapshot is that version's conversion."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    if already < 0 or summary is None:
        return None
    try:
        dt.load_as_version(already)
    except DeltaError as exc:  # e.g. its log entry was cleaned up after a checkpoint
        log.debug("%s: Delta version %d is not loadable (%s); planning the Iceberg table", base, already, exc)
        return None
    files = {_data_file_uri(base, p) for p in _add_action_paths(dt)}
    # The same history, not a table recreated under the same name: file count and commit time agree.
    total = summary.additional_properties.get("total-data-files")
    stamp = summary.additional_properties.get(DELTA_TIMESTAMP_KEY)
    if total is None or int(total) != len(files) or stamp != str(_commit_timestamp(table, base, already)):
        return None
    return files


def check_convertible(name: TableName, dt: DeltaTable) -> None:
    """Raise ``MirrorError`` for a layout the emulation cannot mirror (no retry of it helps)."""
    metadata = dt.metadata()
    if metadata.partition_columns:
        raise MirrorError(
            f"cannot mirror {name} to Iceberg: it is partitioned by {list(metadata.partition_columns)}; "
            "the embedded UniForm emulation supports unpartitioned tables only (drop partition_by)"
        )
    mode = metadata.configuration.get("delta.columnMapping.mode", "none")
    if mode not in ("none", None):
        raise MirrorError(
            f"cannot mirror {name} to Iceberg: delta.columnMapping.mode={mode!r}; the embedded emulation "
            "mirrors plain tables through name mapping (create the table without column mapping)"
        )


def load_or_create(
    catalog: SqlCatalog, name: TableName, delta_uri: str, arrow_schema: pa.Schema, codec: str
) -> IcebergTable:
    """The Iceberg table of ``name``, created (metadata inside the Delta folder) on first use.

    It declares ``codec``, the one the materialiser writes the table's files with (parquet_codec.py).
    """
    identifier = (name.schema, name.table)
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace((name.schema,))
    try:
        return catalog.create_table(
            identifier,
            schema=arrow_schema,
            location=delta_uri,
            properties={"write.parquet.compression-codec": codec},
        )
    except TableAlreadyExistsError:  # another process mirrored it first
        return catalog.load_table(identifier)


def is_data_error(exc: BaseException) -> bool:
    """A conversion that fails on the table's data or layout, which no retry of the same version fixes."""
    if isinstance(exc, OSError | CommitFailedException):
        return False
    return isinstance(exc, OverflowError | ValueError | TypeError | MirrorError | pa.ArrowException)


def _add_action_paths(dt: DeltaTable) -> Iterable[str]:
    actions: Any = dt.get_add_actions(flatten=True)
    paths: list[str] = pa.table(actions).column("path").to_pylist()
    return paths


def _commit_timestamp(table: IcebergTable, delta_base: str, version: int) -> int | None:
    """The commit time (ms) of Delta ``version`` from its commitInfo, read with the Iceberg FileIO.

    Not ``DeltaTable.history()``: it reports wrong timestamps for a table loaded at an older version,
    and its log listing hung against moto's S3 in our runs.
    """
    path = f"{delta_base}/_delta_log/{version:020d}.json"
    try:
        with table.io.new_input(path).open() as stream:
            for line in stream.read().decode().splitlines():
                commit_info = json.loads(line).get("commitInfo") if line.strip() else None
                if isinstance(commit_info, dict) and "timestamp" in commit_info:
                    return int(commit_info["timestamp"])
    except (OSError, ValueError):  # the commit file was cleaned up after a checkpoint, or is unreadable
        return None
    return None


def _data_file_uri(table_base: str, path: str) -> str:
    # Add-action paths are relative and percent-encoded (RFC 2396) unless the file lives elsewhere.
    if "://" in path:
        return path
    return f"{table_base}/{unquote(path)}"
