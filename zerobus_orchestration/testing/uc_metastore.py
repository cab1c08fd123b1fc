"""The fake's table store: one lock, case-insensitive three-part names, UniForm conversion control."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from zerobus_orchestration.testing.uc_state import FakeTable, StatementFailure


@dataclass
class Metastore:
    storage_root: str = "s3://fake-metastore"
    # True: commits do not advance ``converted_delta_version`` until ``convert_uniform`` (lagging UniForm).
    hold_uniform_conversion: bool = False
    tables: dict[str, FakeTable] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @staticmethod
    def key(catalog: str, schema: str, name: str) -> str:
        return f"{catalog}.{schema}.{name}".lower()

    def get(self, catalog: str, schema: str, name: str) -> FakeTable | None:
        return self.tables.get(self.key(catalog, schema, name))

    def get_full(self, full_name: str) -> FakeTable | None:
        return self.tables.get(full_name.lower())

    def by_id(self, table_id: str) -> FakeTable | None:
        return next((t for t in self.tables.values() if t.table_id == table_id), None)

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

    def add(self, table: FakeTable) -> None:
        self.tables[self.key(table.catalog, table.schema, table.name)] = table

    def drop(self, table: FakeTable) -> None:
        self.tables.pop(self.key(table.catalog, table.schema, table.name), None)

    def commit(self, table: FakeTable, operation: str) -> None:
        table.commit(operation)
        if not self.hold_uniform_conversion:
            table.convert_uniform()

    def list(self, catalog: str, schema: str) -> list[FakeTable]:
        prefix = f"{catalog}.{schema}.".lower()
        return [t for k, t in sorted(self.tables.items()) if k.startswith(prefix)]
