"""The table store: one lock, case-insensitive three-part names, catalogs, UniForm conversion control.

Standing alone (the test fake) the tables live in memory and any catalog name is accepted. With a
``TableBacking`` (the emulator's ``delta_backing.DeltaBacking``) every change goes to the real Delta
table first, every read is refreshed from it, Delta tables made by something else (the embedded
``local`` catalog backend) are adopted on first sight, the state is saved after each change, and only
known catalogs (``main`` by default) are accepted, as Unity Catalog does.
"""

from __future__ import annotations

import builtins
import threading
from dataclasses import dataclass, field
from typing import Protocol

from zerobus_orchestration.emulator.unity.state import FakeTable, StatementFailure

DEFAULT_CATALOG = "main"


class TableBacking(Protocol):
    """Real storage behind the metastore (``delta_backing.DeltaBacking`` in the emulator)."""

    def managed_location(self, catalog: str, schema: str, name: str) -> str: ...

    def create(self, table: FakeTable) -> None: ...

    def change(self, table: FakeTable, after: FakeTable) -> None: ...

    def drop(self, table: FakeTable) -> None: ...

    def delete_rows(self, table: FakeTable, predicate: str | None) -> int | None: ...

    def keep_one_copy(self, table: FakeTable, predicate: str) -> int: ...

    def refresh(self, table: FakeTable) -> None: ...

    def discover(self, catalog: str, schema: str, name: str) -> FakeTable | None: ...

    def discover_names(self, catalog: str, schema: str) -> list[str]: ...

    def save(self, metastore: Metastore) -> None: ...


@dataclass
class Metastore:
    storage_root: str = "s3://fake-metastore"
    # True: commits do not advance ``converted_delta_version`` until ``convert_uniform`` (lagging UniForm).
    hold_uniform_conversion: bool = False
    tables: dict[str, FakeTable] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # None: any catalog name is accepted (the standalone fake); else only these, as Unity Catalog does.
    catalogs: set[str] | None = None
    schemas: set[tuple[str, str]] = field(default_factory=set)
    backing: TableBacking | None = None

    @staticmethod
    def key(catalog: str, schema: str, name: str) -> str:
        return f"{catalog}.{schema}.{name}".lower()

    # -- reads ------------------------------------------------------------------------------------

    def get(self, catalog: str, schema: str, name: str) -> FakeTable | None:
        table = self.tables.get(self.key(catalog, schema, name))
        if self.backing is None:
            return table
        if table is None:
            table = self.backing.discover(catalog.lower(), schema.lower(), name.lower())
            if table is None:
                return None
            self._register(table)
            self.backing.save(self)
        self.backing.refresh(table)
        return table

    def get_full(self, full_name: str) -> FakeTable | None:
        parts = full_name.split(".")
        if len(parts) != 3 or not all(parts):
            return None
        return self.get(*parts)

    def by_id(self, table_id: str) -> FakeTable | None:
        table = next((t for t in self.tables.values() if t.table_id == table_id), None)
        if table is not None and self.backing is not None:
            self.backing.refresh(table)
        return table

    def require(self, catalog: str, schema: str, name: str) -> FakeTable:
        table = self.get(catalog, schema, name)
        if table is None:
            raise StatementFailure(
                "TABLE_OR_VIEW_NOT_FOUND",
                f"The table or view `{catalog}`.`{schema}`.`{name}` cannot be found. Verify the spelling "
                "and correctness of the schema and catalog.",
                sqlstate="42P01",
                code="NOT_FOUND",
            )
        return table

    def list(self, catalog: str, schema: str) -> list[FakeTable]:
        if self.backing is not None:
            for name in self.backing.discover_names(catalog.lower(), schema.lower()):
                self.get(catalog, schema, name)  # adopts a Delta table made by something else
        prefix = f"{catalog}.{schema}.".lower()
        found = [t for k, t in sorted(self.tables.items()) if k.startswith(prefix)]
        if self.backing is not None:
            for table in found:
                self.backing.refresh(table)
        return found

    # -- catalogs and schemas ---------------------------------------------------------------------

    def catalog_names(self) -> builtins.list[str]:
        names = set(self.catalogs) if self.catalogs is not None else {DEFAULT_CATALOG}
        names.update(t.catalog for t in self.tables.values())
        return sorted(names)

    def schema_names(self, catalog: str) -> builtins.list[str]:
        names = {s for c, s in self.schemas if c == catalog.lower()}
        names.update(t.schema for t in self.tables.values() if t.catalog == catalog.lower())
        return sorted(names)

    def has_catalog(self, catalog: str) -> bool:
        """Created, configured, or holding a table (an adopted one: its catalog exists where it lives)."""
        name = catalog.lower()
        if self.catalogs is None or name in self.catalogs:
            return True
        return any(t.catalog == name for t in self.tables.values())

    def require_catalog(self, catalog: str) -> None:
        if not self.has_catalog(catalog):
            raise StatementFailure(
                "NO_SUCH_CATALOG_EXCEPTION",
                f"Catalog '{catalog}' was not found. Please verify the catalog name and then retry the "
                f"query or command again. Catalogs here: {', '.join(self.catalog_names())}.",
                sqlstate="42704",
                code="NOT_FOUND",
            )

    def has_schema(self, catalog: str, schema: str) -> bool:
        """Created, or holding a table (registered, or a Delta table on disk this metastore adopts)."""
        if (catalog.lower(), schema.lower()) in self.schemas or schema.lower() in self.schema_names(catalog):
            return True
        return self.backing is not None and bool(self.backing.discover_names(catalog.lower(), schema.lower()))

    def require_schema(self, catalog: str, schema: str) -> None:
        """Databricks refuses a table in a missing schema; the standalone fake (any catalog) never checks."""
        self.require_catalog(catalog)
        if self.catalogs is None or self.has_schema(catalog, schema):
            return
        raise StatementFailure(
            "SCHEMA_NOT_FOUND",
            f"The schema `{catalog}`.`{schema}` cannot be found. Verify the spelling and correctness of "
            "the schema and catalog. If you did not qualify the name with a catalog, verify the "
            "current_schema() output, or qualify the name with the correct catalog. To tolerate the "
            "error on drop use DROP SCHEMA IF EXISTS.",
            sqlstate="42704",
            code="NOT_FOUND",
        )

    def create_catalog(self, catalog: str, *, if_not_exists: bool) -> None:
        if self.catalogs is None or catalog.lower() in self.catalogs:
            if if_not_exists or self.catalogs is None:
                return
            raise StatementFailure(
                "CATALOG_ALREADY_EXISTS",
                f"Cannot create catalog `{catalog}` because it already exists.",
                sqlstate="42P04",
                code="ALREADY_EXISTS",
            )
        self.catalogs.add(catalog.lower())
        self._save()

    def create_schema(self, catalog: str, schema: str, *, if_not_exists: bool) -> None:
        self.require_catalog(catalog)
        key = (catalog.lower(), schema.lower())
        if key in self.schemas or schema.lower() in self.schema_names(catalog):
            if if_not_exists:
                return
            raise StatementFailure(
                "SCHEMA_ALREADY_EXISTS",
                f"Cannot create schema `{catalog}`.`{schema}` because it already exists.",
                sqlstate="42P06",
                code="ALREADY_EXISTS",
            )
        self.schemas.add(key)
        self._save()

    # -- changes ----------------------------------------------------------------------------------

    def create(self, table: FakeTable) -> None:
        """Register a validated new table: its storage first (a failure leaves nothing behind)."""
        self.require_catalog(table.catalog)
        if self.backing is not None:
            if table.location is None:
                table.managed_location = self.backing.managed_location(
                    table.catalog, table.schema, table.name
                )
            self.backing.create(table)
        self._register(table)
        table.version = -1
        self.commit(table, "CREATE TABLE")  # version 0
        self._save()
        if self.backing is not None:
            self.backing.refresh(table)

    def change(self, table: FakeTable, after: FakeTable, operation: str) -> None:
        """Apply a validated change (``after`` is a changed ``table.copy()``): storage first, then here."""
        if self.backing is not None:
            self.backing.change(table, after)
        table.adopt(after)
        self.commit(table, operation)
        self._save()
        if self.backing is not None:
            self.backing.refresh(table)

    def drop(self, table: FakeTable) -> None:
        if self.backing is not None:
            self.backing.drop(table)
        self.tables.pop(self.key(table.catalog, table.schema, table.name), None)
        self._save()

    def delete_rows(self, table: FakeTable, predicate: str | None) -> int | None:
        """Delete the rows matching ``predicate`` (DataFusion SQL; ``None``: all); the count deleted
        (``None`` when delta-rs could not tell).

        Only a backed table holds rows: the standalone fake refuses, so a DELETE is never a silent no-op.
        """
        if self.backing is None:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The in-memory Unity Catalog holds no rows of {table.full_name}: DELETE runs only on the "
                "emulator's local cloud.",
                sqlstate="0A000",
            )
        deleted = self.backing.delete_rows(table, predicate)
        self.backing.refresh(table)  # the DELETE is a new Delta version: history, version
        return deleted

    def keep_one_copy(self, table: FakeTable, predicate: str) -> int:
        """Replace the rows matching ``predicate`` by the first-stamped copy of each position, in one
        commit; the rows inserted. Only a backed table holds rows, as for ``delete_rows``."""
        if self.backing is None:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The in-memory Unity Catalog holds no rows of {table.full_name}: INSERT runs only on the "
                "emulator's local cloud.",
                sqlstate="0A000",
            )
        inserted = self.backing.keep_one_copy(table, predicate)
        self.backing.refresh(table)
        return inserted

    def add(self, table: FakeTable) -> None:
        self._register(table)

    def commit(self, table: FakeTable, operation: str) -> None:
        table.commit(operation)
        # A backed table's UniForm state is the Iceberg mirror's, read on refresh.
        if not self.hold_uniform_conversion and self.backing is None:
            table.convert_uniform()

    def _register(self, table: FakeTable) -> None:
        self.tables[self.key(table.catalog, table.schema, table.name)] = table
        self.schemas.add((table.catalog, table.schema))

    def _save(self) -> None:
        if self.backing is not None:
            self.backing.save(self)
