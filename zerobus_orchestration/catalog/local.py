"""The embedded catalog: the Delta log is the truth, plus a small SQLite registry.

Schema, comments and properties are read from the Delta log on every ``describe`` (never cached).
The registry at ``<warehouse>/_zerobus/catalog.sqlite`` records what the log cannot: table id, full
name, location, role, emulated capabilities and the sinks writing to the table. Tables live where
``tables.table_uri`` says, so the emulator's materialiser finds them.

delta-rs limits shape the execution (docs/architecture.md#delta-rs):
- ``WidenColumn`` is refused: delta-rs has no type widening. ``plan`` already turns it into a ``Refuse``
  step, so ``zerobus-orch plan`` shows the refusal that ``reconcile`` would raise.
- a ``primary_raw`` table is created with the UniForm keys as inert properties and deletion vectors
  off (set again on a live table only on an explicit repair, ``DesiredTable.repair``); column mapping
  and UniForm are reported as *emulated* (real column mapping would stop schema evolution).
- delta-rs commits even no-op metadata changes, so only the plan's (already diffed) steps run and an
  empty plan touches nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import SecretStr

from zerobus_orchestration.catalog.base import (
    EMULATED_COLUMN_MAPPING,
    EMULATED_UNIFORM,
    Access,
    DesiredTable,
    LiveColumn,
    ProtocolInfo,
    ReconcileOutcome,
    TableState,
    VendedCredentials,
    primary_raw_properties,
)
from zerobus_orchestration.catalog.plan import (
    AddColumn,
    ColumnDef,
    CreateTable,
    ReconcilePlan,
    Refuse,
    SetComment,
    SetProperty,
    Step,
    WidenColumn,
    plan,
)
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import (
    CatalogError,
    ConfigError,
    NotSupportedError,
    UnsupportedType,
    ZerobusOrchestrationError,
)
from zerobus_orchestration.locations import is_local
from zerobus_orchestration.tables import TableName, check_embedded_storage, table_uri, zerobus_dir
from zerobus_orchestration.type_map import delta_json_type

REGISTRY_FILE = "catalog.sqlite"
LOCAL_CREDENTIAL_TTL = timedelta(hours=1)
TIMESTAMP_NTZ_FEATURE = "delta.feature.timestampNtz"

_SCHEMA_SQL = (
    """CREATE TABLE IF NOT EXISTS tables (
        full_name TEXT PRIMARY KEY,
        table_id TEXT NOT NULL,
        location TEXT NOT NULL,
        role TEXT,
        emulated TEXT NOT NULL DEFAULT '[]',
        registered_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sinks (
        full_name TEXT NOT NULL,
        sink_id TEXT NOT NULL,
        registered_at TEXT NOT NULL,
        PRIMARY KEY (full_name, sink_id)
    )""",
)


class LocalCatalog:
    """``TableCatalog`` over a warehouse folder (or an ``s3://`` warehouse with ``registry_path``)."""

    def __init__(
        self,
        warehouse: str | Path,
        *,
        storage_options: Mapping[str, str] | None = None,
        registry_path: str | Path | None = None,
    ) -> None:
        self.warehouse = str(warehouse)
        self._storage_options = dict(storage_options or {})
        if registry_path is None:
            if not is_local(self.warehouse):
                raise ConfigError(
                    f"warehouse {self.warehouse} is not a local folder; pass registry_path= for the local "
                    "catalog's SQLite registry"
                )
            registry_path = Path(zerobus_dir(self.warehouse)) / REGISTRY_FILE
        self.registry_path = Path(registry_path)
        self._lock = threading.Lock()
        self.registry_path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            for statement in _SCHEMA_SQL:
                db.execute(statement)

    # --- registry -------------------------------------------------------------------------------

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        # One short-lived connection per operation: the emulator and other processes share the file.
        with closing(sqlite3.connect(self.registry_path, timeout=30.0)) as conn:
            conn.execute("PRAGMA busy_timeout = 30000")
            with conn:
                yield conn

    def _registry_row(self, full_name: str) -> tuple[str, str, str | None, list[str]] | None:
        with self._db() as db:
            row = db.execute(
                "SELECT table_id, location, role, emulated FROM tables WHERE full_name = ?", (full_name,)
            ).fetchone()
        if row is None:
            return None
        return str(row[0]), str(row[1]), row[2], list(json.loads(row[3]))

    def _register_table(self, full_name: str, table_id: str, location: str, role: Role) -> None:
        emulated = [EMULATED_COLUMN_MAPPING, EMULATED_UNIFORM] if role is Role.PRIMARY_RAW else []
        with self._db() as db:
            db.execute(
                "INSERT INTO tables (full_name, table_id, location, role, emulated, registered_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(full_name) DO UPDATE SET "
                "table_id = excluded.table_id, location = excluded.location, role = excluded.role, "
                "emulated = excluded.emulated",
                (full_name, table_id, location, role.value, json.dumps(emulated), _now().isoformat()),
            )

    def _sinks(self, full_name: str) -> tuple[str, ...]:
        with self._db() as db:
            rows = db.execute(
                "SELECT sink_id FROM sinks WHERE full_name = ? ORDER BY sink_id", (full_name,)
            ).fetchall()
        return tuple(str(r[0]) for r in rows)

    # --- TableCatalog ---------------------------------------------------------------------------

    def location(self, table: str) -> str:
        """The table's folder; a name whose folders cannot exist is refused here, before any DDL."""
        name = TableName.parse(table)
        check_embedded_storage(name)
        return table_uri(self.warehouse, name)

    def describe(self, table: str) -> TableState | None:
        from deltalake import DeltaTable

        full_name = TableName.parse(table).full_name
        location = self.location(table)
        if not DeltaTable.is_deltatable(location, storage_options=self._storage_options or None):
            return None
        dt = DeltaTable(location, storage_options=self._storage_options or None)
        schema = json.loads(dt.schema().to_json())
        try:
            columns = tuple(LiveColumn.from_delta_field(f) for f in schema["fields"])
        except UnsupportedType as exc:
            raise CatalogError(f"table {full_name} holds a column this package cannot map: {exc}") from exc
        metadata = dt.metadata()
        proto = dt.protocol()
        row = self._registry_row(full_name)
        return TableState(
            name=full_name,
            columns=columns,
            properties=dict(metadata.configuration),
            protocol=ProtocolInfo(
                proto.min_reader_version,
                proto.min_writer_version,
                frozenset(proto.reader_features or ()),
                frozenset(proto.writer_features or ()),
            ),
            table_id=row[0] if row else str(metadata.id),
            location=location,
            version=dt.version(),
            registered=row is not None,
            role=Role(row[2]) if row and row[2] else None,
            emulated=frozenset(row[3]) if row else frozenset(),
            sinks=self._sinks(full_name),
        )

    def plan(self, table: str, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute now, without executing it."""
        return self._plan_against(self.describe(table), desired)

    def _plan_against(self, live: TableState | None, desired: DesiredTable) -> ReconcilePlan:
        the_plan = plan(live, self._effective(desired), allow_widening=desired.allow_widening)
        if not any(isinstance(s, WidenColumn) for s in the_plan.steps):
            return the_plan
        # delta-rs has no type widening; the shared planner does not know the backend, so the local
        # backend turns the step into a refusal here, where both ``plan`` and ``reconcile`` see it.
        steps = [_refuse_widening(s) if isinstance(s, WidenColumn) else s for s in the_plan.steps]
        refusals_first = sorted(steps, key=lambda s: not isinstance(s, Refuse))
        return ReconcilePlan(the_plan.table, tuple(refusals_first), the_plan.notes)

    def reconcile(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        full_name = TableName.parse(table).full_name
        if TableName.parse(desired.name).full_name != full_name:
            raise CatalogError(f"desired table {desired.name} does not match the table reconciled ({table})")
        with self._lock:  # sinks in one process reconcile one at a time; other processes: see below
            try:
                return self._reconcile_once(table, full_name, desired)
            except ZerobusOrchestrationError:
                raise  # refusals and bad names are answers, not races
            except Exception:
                # Another process may have created or evolved the table between our describe and our
                # commit (delta-rs then fails the commit). Re-read and re-plan once; a second failure
                # is real and propagates.
                return self._reconcile_once(table, full_name, desired)

    def _reconcile_once(self, table: str, full_name: str, desired: DesiredTable) -> ReconcileOutcome:
        live = self.describe(table)
        the_plan = self._plan_against(live, desired)
        the_plan.raise_if_refused()
        version_before = live.version if live else None
        if not the_plan.empty:
            self._execute(full_name, the_plan)
        state = self.describe(table)
        if state is None:  # pragma: no cover - we just created it
            raise CatalogError(f"table {full_name} vanished during reconcile")
        if not state.registered or state.role is not desired.role:
            # A table made outside the catalog is adopted; a role change updates what is emulated.
            self._register_table(full_name, state.table_id or "", self.location(table), desired.role)
            state = self.describe(table)
            assert state is not None
        return ReconcileOutcome(the_plan, not the_plan.empty, version_before, state, the_plan.notes)

    def register_sink(self, table: str, sink_id: str) -> None:
        full_name = TableName.parse(table).full_name
        if self._registry_row(full_name) is None:
            raise CatalogError(f"table {full_name} is not registered; reconcile it before registering sinks")
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO sinks (full_name, sink_id, registered_at) VALUES (?, ?, ?)",
                (full_name, sink_id, _now().isoformat()),
            )

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        full_name = TableName.parse(table).full_name
        location = self.location(table)
        if self._registry_row(full_name) is None:
            raise CatalogError(
                f"table {full_name} is not registered; reconcile it before vending credentials"
            )
        if not is_local(self.warehouse):
            raise NotSupportedError(
                f"table {full_name}: per-table credential vending for an object-store warehouse is not "
                "implemented by the local backend; pass storage options to the writer"
            )
        # A local folder needs no credential; the dummy still expires so expiry handling is exercised.
        return VendedCredentials(
            table=full_name,
            access=access,
            url=location,
            expires_at=_now() + LOCAL_CREDENTIAL_TTL,
            storage_options={},
            token=SecretStr(f"local-{uuid.uuid4().hex}"),
        )

    # --- execution ------------------------------------------------------------------------------

    def _effective(self, desired: DesiredTable) -> DesiredTable:
        # Set when the table is created (or when the operator asks for a repair), never set back
        # behind the user's back: a drifted live value is refused by the preconditions.
        if desired.role is Role.PRIMARY_RAW:
            return desired.with_role_properties(primary_raw_properties(real_column_mapping=False))
        return desired

    def _execute(self, full_name: str, the_plan: ReconcilePlan) -> None:
        from deltalake import DeltaTable

        location = self.location(full_name)
        options = self._storage_options or None
        create = next((s for s in the_plan.steps if isinstance(s, CreateTable)), None)
        if create is not None:
            self._create(full_name, location, create)
            return
        dt = DeltaTable(location, storage_options=options)
        added = [s.column for s in the_plan.steps if isinstance(s, AddColumn)]
        if added:
            _add_columns(dt, added)
        for comment in (s for s in the_plan.steps if isinstance(s, SetComment)):
            dt.alter.set_column_metadata(comment.column, {"comment": comment.comment})
        props = {s.key: s.value for s in the_plan.steps if isinstance(s, SetProperty)}
        if props:
            dt.alter.set_table_properties(props, raise_if_not_exists=False)

    def _create(self, full_name: str, location: str, step: CreateTable) -> None:
        from deltalake import DeltaTable

        # delta-rs 1.6.6 enables timestampNtz for a naive timestamp at the top level, in a list or in a
        # struct only when asked through ``delta.feature.timestampNtz``, and not at all for one inside a
        # map: that table is written and then refused on open. Such columns are added right after the
        # create (after enabling the feature; the table is still empty, so NOT NULL is fine), so they
        # come last in the table.
        deferred = [c for c in step.columns if _naive_timestamp_in_map(c.arrow_type)]
        first = [c for c in step.columns if c not in deferred]
        schema = pa.schema(
            [
                pa.field(c.name, c.arrow_type, nullable=c.nullable, metadata=_comment_metadata(c) or None)
                for c in first
            ]
        )
        configuration = dict(step.properties)
        if any(_contains_naive_timestamp(c.arrow_type) for c in first):
            configuration[TIMESTAMP_NTZ_FEATURE] = "supported"
        dt = DeltaTable.create(
            location,
            schema,
            mode="error",
            configuration=configuration,
            storage_options=self._storage_options or None,
            raise_if_key_not_exists=False,
        )
        role = Role(step.properties.get("twg.role", Role.DERIVED.value))
        self._register_table(full_name, str(dt.metadata().id), location, role)
        if deferred:
            _add_columns(dt, deferred)


def _refuse_widening(step: WidenColumn) -> Step:
    return Refuse(
        step.table,
        step.column,
        "the local (delta-rs) backend cannot widen column types; cast the column to the live type, "
        "or rewrite the table",
        step.from_type,
        step.to_type,
    )


def _comment_metadata(column: ColumnDef) -> dict[str, str]:
    return {"comment": column.comment} if column.comment is not None else {}


def _add_columns(dt: Any, columns: list[ColumnDef]) -> None:
    from deltalake import Field, TableFeatures

    features = set(dt.protocol().reader_features or ()) | set(dt.protocol().writer_features or ())
    if "timestampNtz" not in features and any(_contains_naive_timestamp(c.arrow_type) for c in columns):
        dt.alter.add_feature(TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True)
    fields = [
        Field.from_json(
            json.dumps(
                {
                    "name": c.name,
                    "type": delta_json_type(c.arrow_type),
                    "nullable": c.nullable,
                    "metadata": _comment_metadata(c),
                }
            )
        )
        for c in columns
    ]
    dt.alter.add_columns(fields)


def _naive_timestamp_in_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return _contains_naive_timestamp(t)
    if pa.types.is_list(t):
        return _naive_timestamp_in_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_naive_timestamp_in_map(t.field(i).type) for i in range(t.num_fields))
    return False


def _contains_naive_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_list(t):
        return _contains_naive_timestamp(t.value_type)
    if pa.types.is_map(t):
        return _contains_naive_timestamp(t.key_type) or _contains_naive_timestamp(t.item_type)
    if pa.types.is_struct(t):
        return any(_contains_naive_timestamp(t.field(i).type) for i in range(t.num_fields))
    return False


def _now() -> datetime:
    return datetime.now(UTC)
