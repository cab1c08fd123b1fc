"""The embedded catalog: the Delta log is the truth, plus a small SQLite registry.

Schema, comments and properties are read from the Delta log on every ``describe`` (a kept table handle
is brought up to its latest version, ``delta_handles``; nothing read is cached).
The registry at ``<warehouse>/_zerobus/catalog.sqlite`` records what the log cannot: table id, full
name, location, role, emulated capabilities and the sinks writing to the table. Tables live where
``tables.table_uri`` says, so the emulator's materialiser finds them.

delta-rs limits shape the execution (docs/architecture.md#delta-rs):
- ``WidenColumn`` (planned only with ``catalog.allow_widening``): delta-rs has no type widening, but this
  backend owns the files, so a derived table is rewritten: every row is read, cast to the widened
  schema and written back as one new Delta version (``mode="overwrite"``, ``schema_mode="overwrite"``;
  table id, properties and comments are kept, and readers of an older version are unaffected). A
  ``primary_raw`` table is not rewritten (Zerobus streams append to it while it would be rewritten):
  ``plan`` turns that step into a ``Refuse``, so ``zerobus-orch plan`` shows what ``reconcile`` raises.
- Unity's rules are applied before anything is created: a table's catalog must exist (``catalogs``,
  the ``catalog.local_catalogs`` setting, plus any catalog that already holds a registered table), so a
  typo (``mian.raw.t``) is refused instead of creating a catalog; and a column name Delta allows only
  with column mapping (``CHARS_NEEDING_COLUMN_MAPPING``, e.g. a space), for which Unity turns column
  mapping ``name`` on, is refused naming the column: delta-rs (1.6) can create and append to such a
  table, but cannot add columns to it, its pyarrow reader returns the columns as NULL, and its Parquet
  files carry physical names (``col-<uuid>``) that the Iceberg mirror's name mapping does not know.
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
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import SecretStr

from zerobus_orchestration.catalog import delta_dedupe, delta_handles
from zerobus_orchestration.catalog.base import (
    CHARS_NEEDING_COLUMN_MAPPING,
    EMULATED_COLUMN_MAPPING,
    EMULATED_UNIFORM,
    Access,
    DesiredTable,
    LiveColumn,
    PositionsHeldTwice,
    ProtocolInfo,
    ReconcileOutcome,
    RowsOfSources,
    TableLocation,
    TableState,
    VendedCredentials,
    primary_raw_properties,
)
from zerobus_orchestration.catalog.delta_schema_ops import (
    TIMESTAMP_NTZ_FEATURE,
    add_columns,
    comment_metadata,
    contains_naive_timestamp,
    naive_timestamp_in_map,
    no_rebase,
    rewrite_widened,
)
from zerobus_orchestration.catalog.plan import (
    AddColumn,
    CreateTable,
    ReconcilePlan,
    Refuse,
    SetComment,
    SetProperty,
    Step,
    WidenColumn,
    names_needing_column_mapping,
    plan,
    unsendable_refusals,
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
from zerobus_orchestration.owner_only import private_file
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.tables import TableName, check_embedded_storage, table_uri, zerobus_dir

if TYPE_CHECKING:
    from deltalake import DeltaTable

REGISTRY_FILE = "catalog.sqlite"
DEFAULT_CATALOGS = ("main",)
"""The catalogs a fresh local warehouse has (``catalog.local_catalogs``), like a new Unity metastore's."""
LOCAL_CREDENTIAL_TTL = timedelta(hours=1)
_DELETE_ATTEMPTS = 5
# Reconciles racing other processes (each attempt re-reads the table and re-plans).
_RECONCILE_ATTEMPTS = 4

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
        catalogs: Iterable[str] = DEFAULT_CATALOGS,
    ) -> None:
        self.warehouse = str(warehouse)
        self.catalogs = frozenset(c.lower() for c in catalogs)
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
        private_file(self.registry_path)  # 0600 before SQLite opens it: its side files take its mode
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

    def _registration(
        self, full_name: str
    ) -> tuple[tuple[str, str, str | None, list[str]] | None, tuple[str, ...]]:
        """The registry row and the registered sinks, over one connection (``describe`` runs per write)."""
        with self._db() as db:
            row = db.execute(
                "SELECT table_id, location, role, emulated FROM tables WHERE full_name = ?", (full_name,)
            ).fetchone()
            sinks = db.execute(
                "SELECT sink_id FROM sinks WHERE full_name = ? ORDER BY sink_id", (full_name,)
            ).fetchall()
        registered = None if row is None else (str(row[0]), str(row[1]), row[2], list(json.loads(row[3])))
        return registered, tuple(str(r[0]) for r in sinks)

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

    # --- TableCatalog ---------------------------------------------------------------------------

    def location(self, table: str) -> str:
        """The table's folder; a name whose folders cannot exist is refused here, before any DDL."""
        name = TableName.parse(table)
        check_embedded_storage(name)
        return table_uri(self.warehouse, name)

    def describe(self, table: str) -> TableState | None:
        full_name = TableName.parse(table).full_name
        location = self.location(table)
        with self._latest(location) as dt:
            if dt is None:
                return None
            schema = json.loads(dt.schema().to_json())
            metadata = dt.metadata()
            proto = dt.protocol()
            version = dt.version()
        try:
            columns = tuple(LiveColumn.from_delta_field(f) for f in schema["fields"])
        except UnsupportedType as exc:
            raise CatalogError(f"table {full_name} holds a column this package cannot map: {exc}") from exc
        row, sinks = self._registration(full_name)
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
            version=version,
            registered=row is not None,
            role=Role(row[2]) if row and row[2] else None,
            emulated=frozenset(row[3]) if row else frozenset(),
            sinks=sinks,
        )

    def locate(self, table: str) -> TableLocation | None:
        from deltalake import DeltaTable

        full_name = TableName.parse(table).full_name
        location = self.location(table)
        if not DeltaTable.is_deltatable(location, storage_options=self._storage_options or None):
            return None
        row, _ = self._registration(full_name)
        return TableLocation(full_name, location, registered=row is not None)

    def latest_version(self, table: str) -> int | None:
        with self._latest(self.location(table)) as dt:
            return None if dt is None else int(dt.version())

    def _latest(self, location: str) -> AbstractContextManager[DeltaTable | None]:
        """The table at ``location`` at its latest version, or None: a kept handle brought up to date
        (``delta_handles``), since re-opening replays the log and the write path reads it every write."""
        from deltalake import DeltaTable

        options = self._storage_options or None
        return delta_handles.latest(
            location,
            lambda: DeltaTable(location, storage_options=options),
            lambda: DeltaTable.is_deltatable(location, storage_options=options),
            cacheable=options is None,
        )

    def plan(self, table: str, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute now, without executing it."""
        return self.plan_against(self.describe(table), desired)

    def known_catalogs(self) -> frozenset[str]:
        """``catalogs`` plus every catalog already holding a registered table (it was created then)."""
        with self._db() as db:
            rows = db.execute("SELECT full_name FROM tables").fetchall()
        return self.catalogs | {str(r[0]).split(".", 1)[0] for r in rows}

    def plan_against(self, live: TableState | None, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute against ``live`` (a ``describe`` of the table), without
        reading the catalog again."""
        if live is None:
            missing = self._missing_catalog(desired.name)
            if missing is not None:
                return ReconcilePlan(desired.name, (missing,))
        the_plan = plan(live, self._effective(desired), allow_widening=desired.allow_widening)
        # The shared planner does not know the backend: what delta-rs cannot do becomes a refusal here,
        # where both ``plan`` and ``reconcile`` see it.
        mapped = [
            _refuse_column_mapping(the_plan.table, n) for n in names_needing_column_mapping(the_plan.steps)
        ]
        if not mapped:  # a name that needs column mapping is refused above, whatever the wire says
            mapped = list(unsendable_refusals(live, the_plan))
        primary_raw = desired.role is Role.PRIMARY_RAW or (live is not None and live.role is Role.PRIMARY_RAW)
        steps = [
            _refuse_widening(s) if isinstance(s, WidenColumn) and primary_raw else s for s in the_plan.steps
        ]
        if not mapped and steps == list(the_plan.steps):
            return the_plan
        refusals_first = sorted([*mapped, *steps], key=lambda s: not isinstance(s, Refuse))
        return ReconcilePlan(the_plan.table, tuple(refusals_first), the_plan.notes)

    def _missing_catalog(self, table: str) -> Refuse | None:
        catalog = TableName.parse(table).catalog
        known = self.known_catalogs()
        if catalog in known:
            return None
        listed = ", ".join(sorted(known)) or "none"
        return Refuse(
            table,
            None,
            f"catalog {catalog!r} does not exist in the local warehouse (known catalogs: {listed}); "
            "Unity Catalog creates a table only in an existing catalog. Fix: correct the catalog name, "
            f"or create it locally by adding it to catalog.local_catalogs "
            f"(ZEROBUS_CATALOG__LOCAL_CATALOGS={','.join(sorted({*known, catalog}))})",
        )

    def reconcile(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        full_name = TableName.parse(table).full_name
        if TableName.parse(desired.name).full_name != full_name:
            raise CatalogError(f"desired table {desired.name} does not match the table reconciled ({table})")
        with self._lock:  # sinks in one process reconcile one at a time; other processes: see below
            for attempt in range(_RECONCILE_ATTEMPTS):
                last = attempt == _RECONCILE_ATTEMPTS - 1
                try:
                    outcome = self._reconcile_once(table, full_name, desired)
                except ZerobusOrchestrationError:
                    raise  # refusals and bad names are answers, not races
                except Exception:
                    # Another process created or evolved the table between our describe and our
                    # commit (delta-rs then fails the commit): re-read and re-plan.
                    if last:
                        raise
                    continue
                # A commit of ours can still have been made on a snapshot another process changed
                # (a metadata action carries the whole schema): the outcome is what the table now
                # is, so it is checked against the desired table, not assumed.
                if self.plan_against(outcome.state, desired).empty:
                    return outcome
            raise CatalogError(
                f"table {full_name}: {_RECONCILE_ATTEMPTS} reconciles in a row were undone by concurrent "
                "changes from other processes; re-run once the other writers' reconciles have finished"
            )

    def _reconcile_once(self, table: str, full_name: str, desired: DesiredTable) -> ReconcileOutcome:
        live = self.describe(table)
        the_plan = self.plan_against(live, desired)
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

    def delete_rows(self, table: str, rows: RowsOfSources) -> None:
        """Delete through delta-rs (a rewrite of the files holding them), retried on a commit conflict."""
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError

        full_name = TableName.parse(table).full_name
        if not rows.tags:
            return
        # A DataFusion SQL predicate: identifiers double-quoted, string literals with '' escapes.
        values = ", ".join("'" + tag.replace("'", "''") + "'" for tag in rows.tags)
        predicate = f'"{SOURCE}" IN ({values})'
        for attempt in range(_DELETE_ATTEMPTS):
            dt = DeltaTable(self.location(table), storage_options=self._storage_options or None)
            try:
                dt.delete(predicate)
                return
            except CommitFailedError as exc:
                # The emulator committed an append between our read and our commit: re-read, retry.
                if attempt == _DELETE_ATTEMPTS - 1:
                    raise CatalogError(
                        f"table {full_name}: deleting superseded rows lost {_DELETE_ATTEMPTS} commit races "
                        f"to concurrent writers ({exc}); re-run the write to retry the delete"
                    ) from exc

    def keep_one_copy(self, table: str, positions: PositionsHeldTwice) -> None:
        """One delta-rs overwrite of exactly those positions (``delta_dedupe``), retried on a commit
        conflict with the emulator's appends."""
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError

        full_name = TableName.parse(table).full_name
        for attempt in range(_DELETE_ATTEMPTS):
            dt = DeltaTable(self.location(table), storage_options=self._storage_options or None)
            try:
                delta_dedupe.keep_one_copy(dt, positions, self._storage_options or None)
                return
            except CommitFailedError as exc:
                if attempt == _DELETE_ATTEMPTS - 1:
                    raise CatalogError(
                        f"table {full_name}: removing duplicate rows lost {_DELETE_ATTEMPTS} commit races "
                        f"to concurrent writers ({exc}); run the repair again"
                    ) from exc

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
        widened = {s.column: s.arrow_type for s in the_plan.steps if isinstance(s, WidenColumn)}
        if widened:
            rewrite_widened(dt, widened)
            dt = DeltaTable(location, storage_options=options)
        added = [s.column for s in the_plan.steps if isinstance(s, AddColumn)]
        if added:
            add_columns(dt, added)
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
        deferred = [c for c in step.columns if naive_timestamp_in_map(c.arrow_type)]
        first = [c for c in step.columns if c not in deferred]
        schema = pa.schema(
            [
                pa.field(c.name, c.arrow_type, nullable=c.nullable, metadata=comment_metadata(c) or None)
                for c in first
            ]
        )
        configuration = dict(step.properties)
        if any(contains_naive_timestamp(c.arrow_type) for c in first):
            configuration[TIMESTAMP_NTZ_FEATURE] = "supported"
        dt = DeltaTable.create(
            location,
            schema,
            mode="error",
            configuration=configuration,
            storage_options=self._storage_options or None,
            raise_if_key_not_exists=False,
            commit_properties=no_rebase(),
        )
        role = Role(step.properties.get("twg.role", Role.DERIVED.value))
        self._register_table(full_name, str(dt.metadata().id), location, role)
        if deferred:
            add_columns(dt, deferred)


def _refuse_widening(step: WidenColumn) -> Step:
    return Refuse(
        step.table,
        step.column,
        "the local (delta-rs) backend cannot widen a primary_raw table: it widens only by rewriting a "
        "derived table, and a primary_raw one has Zerobus streams appending to it; cast the column to "
        "the live type, or write to a new table",
        step.from_type,
        step.to_type,
    )


def _refuse_column_mapping(table: str, name: str) -> Refuse:
    safe = "".join("_" if ch in CHARS_NEEDING_COLUMN_MAPPING else ch for ch in name.split(".")[-1])
    return Refuse(
        table,
        name,
        "the name contains characters Delta allows only with column mapping (a space or one of "
        "',;{}()=', a tab or a newline); Unity Catalog turns column mapping 'name' on for it, but the "
        "local (delta-rs) backend cannot evolve or read a column-mapped table faithfully. Fix: rename "
        f"the column (e.g. {safe!r})",
    )


def _now() -> datetime:
    return datetime.now(UTC)
