"""The emulator's Unity Catalog metastore, backed by the real Delta tables Zerobus writes.

A MANAGED table lives where the emulator's ingest writes it (``tables.table_uri``: the same folder the
embedded ``local`` backend uses), so a ``CREATE TABLE`` through the SQL API creates the very Delta table
the next Zerobus stream appends to. DDL is applied to that table first (a failure leaves the metastore
as it was); every read refreshes the record from the Delta log, so ``tables.get`` shows the live columns,
comments, properties and version. A Delta table made by something else (the ``local`` backend, a test
writing with deltalake) is adopted on first sight. The records (table ids, declared properties and
features, catalogs and schemas) are saved to a JSON file in the emulator's local state, so they survive
a restart.

What delta-rs cannot do is declared, not physical (docs/adr/0003-emulator-fidelity-limits.md): column
mapping, deletion vectors, type widening and protocol keys are kept in the record and reported as
Databricks would (``DESCRIBE DETAIL`` features, protocol versions), while the Delta table stays plain
and readable; the UniForm keys are inert Delta properties. ``ALTER COLUMN ... TYPE`` is refused.
An EXTERNAL table (``LOCATION``) is a record only: Zerobus writes managed tables.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Field, Schema

from zerobus_orchestration.emulator.errors import EmulatorError
from zerobus_orchestration.emulator.unity import types as uc_types
from zerobus_orchestration.emulator.unity.metastore import Metastore
from zerobus_orchestration.emulator.unity.replace_where import COPY_COLUMN
from zerobus_orchestration.emulator.unity.state import FakeColumn, FakeTable, StatementFailure, now_ms
from zerobus_orchestration.errors import TableNameError, UnsupportedType
from zerobus_orchestration.locations import is_local, local_path
from zerobus_orchestration.owner_only import open_private, private_dir
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.tables import TableName, table_uri
from zerobus_orchestration.type_map import arrow_type_of_delta, delta_type

log = logging.getLogger(__name__)

STATE_VERSION = 1
_HISTORY_ROWS = 20
_DELETE_ATTEMPTS = 5
# Declared only: delta-rs would act on these (column mapping it cannot evolve, deletion vectors its
# reader refuses, features and protocol versions), so the Delta table never gets them.
_DECLARED_ONLY_PREFIXES = (
    "delta.columnMapping.",
    "delta.feature.",
    "delta.minReaderVersion",
    "delta.minWriterVersion",
)
_DECLARED_ONLY_KEYS = frozenset(
    {"delta.enableTypeWidening", "delta.enableRowTracking", "delta.enableChangeDataFeed"}
)
_NTZ_FEATURE = "delta.feature.timestampNtz"

ConvertedVersion = Callable[[str], int | None]
"""The Delta version the Iceberg mirror reflects for a table (None: nothing converted yet)."""


def physical_properties(properties: dict[str, str]) -> dict[str, str]:
    """The declared properties that go on the Delta table as they are (inert or understood by delta-rs)."""
    return {
        k: v
        for k, v in properties.items()
        if not k.startswith(_DECLARED_ONLY_PREFIXES)
        and k not in _DECLARED_ONLY_KEYS
        and not (k == "delta.enableDeletionVectors" and v.strip().lower() != "false")
    }


class DeltaBacking:
    """``metastore.TableBacking`` over the warehouse's Delta tables; state saved to ``state_file``."""

    def __init__(
        self,
        warehouse: str,
        state_file: Path,
        *,
        storage_options: dict[str, str] | None = None,
        converted_version: ConvertedVersion | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.state_file = state_file
        self._options = storage_options or None
        self._converted_version = converted_version
        self._seen_version: dict[str, int] = {}  # table id -> Delta version the record was refreshed at

    # -- locations --------------------------------------------------------------------------------

    def managed_location(self, catalog: str, schema: str, name: str) -> str:
        try:
            return table_uri(self.warehouse, TableName(catalog, schema, name))
        except TableNameError as exc:  # the emulator's ingest could never write it
            raise StatementFailure("INVALID_IDENTIFIER", str(exc), sqlstate="42602") from exc

    def _open(self, table: FakeTable) -> DeltaTable | None:
        uri = table.storage_location
        if not DeltaTable.is_deltatable(uri, storage_options=self._options):
            return None
        return DeltaTable(uri, storage_options=self._options)

    def _open_existing(self, table: FakeTable) -> DeltaTable:
        """The table's Delta table; its absence fails the statement as Databricks does."""
        dt = self._open(table)
        if dt is None:
            raise StatementFailure(
                "DELTA_TABLE_NOT_FOUND",
                f"The Delta table of {table.full_name} is missing at {table.storage_location}.",
                sqlstate="42P01",
            )
        return dt

    # -- changes ----------------------------------------------------------------------------------

    def create(self, table: FakeTable) -> None:
        if table.location is not None:
            return
        uri = table.storage_location
        if DeltaTable.is_deltatable(uri, storage_options=self._options):
            raise StatementFailure(
                "TABLE_OR_VIEW_ALREADY_EXISTS",
                f"Cannot create table {table.full_name}: a Delta table already exists at {uri}.",
                sqlstate="42P07",
                code="ALREADY_EXISTS",
            )
        schema = {
            "type": "struct",
            "fields": [
                uc_types.struct_field_json(c.name, c.dtype, c.nullable, c.comment) for c in table.columns
            ],
        }
        configuration = physical_properties(table.properties)
        if any(uc_types.contains_ntz(c.dtype) for c in table.columns):
            configuration[_NTZ_FEATURE] = "supported"  # delta-rs enables timestamp_ntz only when asked
        try:
            created = DeltaTable.create(
                uri,
                Schema.from_json(json.dumps(schema)),
                mode="error",
                description=table.comment,
                configuration=configuration,
                storage_options=self._options,
                raise_if_key_not_exists=False,
                # Exactly version 0 or fail: delta-rs would retry a losing CREATE as version 1,
                # replacing the schema of a table another process created meanwhile.
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except Exception as exc:  # delta-rs refuses (a type it cannot store, storage): the statement fails
            raise _storage_failure(table, "create", exc) from exc
        table.table_id = str(created.metadata().id)

    def change(self, table: FakeTable, after: FakeTable) -> None:
        if table.location is not None:
            return
        dt = self._open_existing(table)
        before = {c.name.lower(): c for c in table.columns}
        for column in after.columns:
            old = before.get(column.name.lower())
            if old is not None and uc_types.type_text(old.dtype) != uc_types.type_text(column.dtype):
                raise StatementFailure(
                    "UNSUPPORTED_STATEMENT",
                    f"The local cloud cannot change the type of column `{column.name}` of {table.full_name} "
                    f"(delta-rs has no type widening): rewrite the table instead.",
                    sqlstate="0A000",
                )
        try:
            self._apply(dt, table, after, before)
        except StatementFailure:
            raise
        except Exception as exc:
            raise _storage_failure(table, "alter", exc) from exc

    def _apply(
        self, dt: DeltaTable, table: FakeTable, after: FakeTable, before: dict[str, FakeColumn]
    ) -> None:
        added = [c for c in after.columns if c.name.lower() not in before]
        if added:
            if any(uc_types.contains_ntz(c.dtype) for c in added):
                dt.alter.set_table_properties({_NTZ_FEATURE: "supported"}, raise_if_not_exists=False)
            dt.alter.add_columns(
                [
                    Field.from_json(
                        json.dumps(uc_types.struct_field_json(c.name, c.dtype, c.nullable, c.comment))
                    )
                    for c in added
                ]
            )
        for column in after.columns:
            old = before.get(column.name.lower())
            if old is not None and old.comment != column.comment:
                dt.alter.set_column_metadata(column.name, {"comment": column.comment or ""})
        old_props, new_props = physical_properties(table.properties), physical_properties(after.properties)
        changed = {k: v for k, v in new_props.items() if old_props.get(k) != v}
        if changed:
            dt.alter.set_table_properties(changed, raise_if_not_exists=False)
        if after.comment != table.comment:
            dt.alter.set_table_description(after.comment or "")

    def delete_rows(self, table: FakeTable, predicate: str | None) -> int | None:
        """``DeltaTable.delete`` (a rewrite of the files holding matching rows), re-run on a lost commit.

        The emulator's ingest appends to the same table meanwhile; a commit that loses to one is re-read
        and re-run, and after ``_DELETE_ATTEMPTS`` losses the statement fails ``DELTA_CONCURRENT_APPEND``
        as on Databricks (the client re-runs it: the predicate is idempotent).
        """
        from deltalake.exceptions import CommitFailedError

        if table.location is not None:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The local cloud keeps only the record of the EXTERNAL table {table.full_name}; it cannot "
                "delete its rows.",
                sqlstate="0A000",
            )
        for attempt in range(_DELETE_ATTEMPTS):
            dt = self._open_existing(table)
            try:
                metrics = dt.delete(predicate)
            except CommitFailedError as exc:
                if attempt == _DELETE_ATTEMPTS - 1:
                    raise StatementFailure(
                        "DELTA_CONCURRENT_APPEND",
                        f"ConcurrentAppendException: Files were added to {table.full_name} by a concurrent "
                        f"update ({_DELETE_ATTEMPTS} attempts; last: {exc}). Please try the operation again.",
                        sqlstate="2D521",
                        code="ABORTED",
                    ) from exc
                log.info("local Unity Catalog: DELETE on %s lost a commit race, re-running", table.full_name)
            except Exception as exc:  # a predicate DataFusion refuses, storage: the statement fails
                raise _storage_failure(table, "delete from", exc) from exc
            else:
                # delta-rs omits the count when it cannot tell without scanning: then unknown (null),
                # never a made-up 0.
                count = metrics.get("num_deleted_rows")
                return None if count is None else int(count)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def keep_one_copy(self, table: FakeTable, predicate: str) -> int:
        """The rows matching ``predicate``, first-stamped copy of each ``(_twg_source, _twg_offset)``
        kept, written back with ``write_deltalake(mode="overwrite", predicate=...)``: one commit that
        removes the matches and adds the kept rows (what Databricks' ``REPLACE WHERE`` commits). Re-run on
        a lost commit, like a DELETE."""
        from deltalake import QueryBuilder, write_deltalake
        from deltalake.exceptions import CommitFailedError

        if table.location is not None:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The local cloud keeps only the record of the EXTERNAL table {table.full_name}; it cannot "
                "rewrite its rows.",
                sqlstate="0A000",
            )
        query = (
            f'SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "{SOURCE}", "{OFFSET}" ORDER BY '
            f'"{EMIT_TS}") AS "{COPY_COLUMN}" FROM raw WHERE {predicate}) WHERE "{COPY_COLUMN}" = 1'
        )
        for attempt in range(_DELETE_ATTEMPTS):
            dt = self._open_existing(table)
            try:
                rows = pa.table(QueryBuilder().register("raw", dt).execute(query).read_all())
                schema = pa.schema(dt.schema().to_arrow())
                # DataFusion answers with view types; the table's own types go back in (same values).
                kept = pa.table([pc.cast(rows.column(f.name), f.type) for f in schema], schema=schema)
                write_deltalake(
                    dt, kept, mode="overwrite", predicate=predicate, storage_options=self._options
                )
            except CommitFailedError as exc:
                if attempt == _DELETE_ATTEMPTS - 1:
                    raise StatementFailure(
                        "DELTA_CONCURRENT_APPEND",
                        f"ConcurrentAppendException: Files were added to {table.full_name} by a concurrent "
                        f"update ({_DELETE_ATTEMPTS} attempts; last: {exc}). Please try the operation again.",
                        sqlstate="2D521",
                        code="ABORTED",
                    ) from exc
                log.info("local Unity Catalog: INSERT on %s lost a commit race, re-running", table.full_name)
            except Exception as exc:  # a predicate DataFusion refuses, storage: the statement fails
                raise _storage_failure(table, "rewrite rows of", exc) from exc
            else:
                return int(kept.num_rows)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def drop(self, table: FakeTable) -> None:
        if table.location is not None:
            return
        uri = table.storage_location
        if not is_local(uri):
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The local cloud drops managed tables only on a folder warehouse; delete {uri} yourself.",
                sqlstate="0A000",
            )
        shutil.rmtree(local_path(uri), ignore_errors=True)
        self._seen_version.pop(table.table_id, None)

    # -- reads ------------------------------------------------------------------------------------

    def refresh(self, table: FakeTable) -> None:
        """The record brought to the Delta table's current version (columns, comments, properties)."""
        if table.location is not None:
            return
        dt = self._open(table)
        if dt is None:
            return  # deleted behind the metastore's back: keep the last known shape
        version = dt.version()
        if self._seen_version.get(table.table_id) != version:
            self._read_delta(table, dt)
            self._seen_version[table.table_id] = version
        converted = self._converted_version(table.full_name) if self._converted_version else None
        if converted is not None and converted != table.converted_delta_version:
            table.converted_delta_version = converted
            table.converted_at = now_ms()

    def _read_delta(self, table: FakeTable, dt: DeltaTable) -> None:
        metadata = dt.metadata()
        table.columns = [_column(table, f) for f in json.loads(dt.schema().to_json())["fields"]]
        table.properties = {**table.properties, **dict(metadata.configuration)}
        protocol = dt.protocol()
        table.features |= set(protocol.reader_features or ()) | set(protocol.writer_features or ())
        table.note_column_types()
        table.comment = metadata.description or None
        history = sorted(dt.history(limit=_HISTORY_ROWS), key=lambda h: int(h["version"]))
        table.history = [
            (int(h["version"]), int(h["timestamp"]), str(h.get("operation", ""))) for h in history
        ]
        table.version = dt.version()
        if table.history:
            table.updated_at = table.history[-1][1]

    def discover(self, catalog: str, schema: str, name: str) -> FakeTable | None:
        """A Delta table at the managed location that the metastore has no record of, adopted."""
        try:
            uri = table_uri(self.warehouse, TableName(catalog, schema, name))
        except TableNameError:
            return None
        if not DeltaTable.is_deltatable(uri, storage_options=self._options):
            return None
        dt = DeltaTable(uri, storage_options=self._options)
        metadata = dt.metadata()
        table = FakeTable(
            catalog,
            schema,
            name,
            storage_root=self.warehouse,
            table_id=str(metadata.id),
            created_at=int(metadata.created_time or now_ms()),
            managed_location=uri,
        )
        self._read_delta(table, dt)
        self._seen_version[table.table_id] = table.version
        log.info("local Unity Catalog: adopted the Delta table of %s at %s", table.full_name, uri)
        return table

    def discover_names(self, catalog: str, schema: str) -> list[str]:
        """Table folders under ``<warehouse>/<catalog>/<schema>`` (a folder warehouse only)."""
        if not is_local(self.warehouse):
            return []
        folder = Path(local_path(self.warehouse)) / catalog / schema
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if (p / "_delta_log").is_dir())

    # -- persistence ------------------------------------------------------------------------------

    def save(self, metastore: Metastore) -> None:
        state = {
            "version": STATE_VERSION,
            "catalogs": sorted(metastore.catalogs or ()),
            "schemas": sorted([c, s] for c, s in metastore.schemas),
            "tables": [_record(t) for t in metastore.tables.values()],
        }
        private_dir(self.state_file.parent)
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}.tmp")
        fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.state_file)

    def load(self, metastore: Metastore) -> None:
        """The saved records into ``metastore`` (nothing when there is no state file yet)."""
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
            catalogs = [str(c) for c in state.get("catalogs", ())]
            schemas = [(str(c), str(s)) for c, s in state.get("schemas", ())]
            tables = [_table_of(record, self.warehouse) for record in state.get("tables", ())]
        except FileNotFoundError:
            return
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EmulatorError(
                f"the local Unity Catalog's records in {self.state_file} cannot be read "
                f"({type(exc).__name__}: {exc}). Fix: restore the file, or move it away; the Delta tables "
                "in the warehouse are then adopted again (same table ids, but without the properties only "
                "declared, such as column mapping)"
            ) from exc
        if metastore.catalogs is not None:
            metastore.catalogs.update(catalogs)
        metastore.schemas.update(schemas)
        for table in tables:
            metastore.tables[Metastore.key(table.catalog, table.schema, table.name)] = table


def _storage_failure(table: FakeTable, what: str, exc: Exception) -> StatementFailure:
    return StatementFailure(
        "DELTA_OPERATION_FAILED",
        f"The local cloud could not {what} the Delta table of {table.full_name} at "
        f"{table.storage_location}: {type(exc).__name__}: {exc}",
        sqlstate="XX000",
        code="INTERNAL_ERROR",
    )


def _column(table: FakeTable, field: dict[str, Any]) -> FakeColumn:
    try:
        text = delta_type(arrow_type_of_delta(field["type"]), quote_fields=True)
    except UnsupportedType as exc:
        raise StatementFailure(
            "DELTA_UNSUPPORTED_DATA_TYPE", f"table {table.full_name}, column {field['name']!r}: {exc}"
        ) from exc
    comment = (field.get("metadata") or {}).get("comment")
    return FakeColumn(
        str(field["name"]), uc_types.parse_type(text), bool(field.get("nullable", True)), comment
    )


def _record(table: FakeTable) -> dict[str, Any]:
    record: dict[str, Any] = {
        "catalog": table.catalog,
        "schema": table.schema,
        "name": table.name,
        "table_id": table.table_id,
        "created_at": table.created_at,
        "properties": table.properties,
        "features": sorted(table.features),
        "comment": table.comment,
        "location": table.location,
        "managed_location": table.managed_location,
    }
    if table.location is not None:  # no Delta table to read the columns back from
        record["columns"] = [
            {"name": c.name, "type": uc_types.sql_text(c.dtype), "nullable": c.nullable, "comment": c.comment}
            for c in table.columns
        ]
    return record


def _table_of(record: dict[str, Any], warehouse: str) -> FakeTable:
    return FakeTable(
        str(record["catalog"]),
        str(record["schema"]),
        str(record["name"]),
        storage_root=warehouse,
        columns=[
            FakeColumn(
                str(c["name"]), uc_types.parse_type(str(c["type"])), bool(c["nullable"]), c.get("comment")
            )
            for c in record.get("columns", ())
        ],
        properties={str(k): str(v) for k, v in dict(record.get("properties") or {}).items()},
        features={str(f) for f in record.get("features", ())},
        table_id=str(record["table_id"]),
        created_at=int(record.get("created_at") or now_ms()),
        comment=record.get("comment"),
        location=record.get("location"),
        managed_location=record.get("managed_location"),
    )
