"""The ``unity`` catalog backend: Unity Catalog through the official ``databricks-sdk``.

- ``describe``: the table's REST JSON (``GET /api/2.1/unity-catalog/tables/<name>``, parsed with the SDK's
  own ``TableInfo.from_dict``, which is what ``tables.get`` does; the raw JSON is kept because the typed
  ``TableInfo`` drops ``delta_uniform_iceberg``), then ``DESCRIBE DETAIL`` for the protocol and table
  features (authoritative; REST ``properties`` are only a hint; both read by ``unity_tables``) and
  ``DESCRIBE HISTORY`` for the version.
- ``reconcile``: the shared pure plan (``plan.plan``), rendered by the shared ``ddl.render_plan`` and run
  one statement at a time through the SQL Statement Execution API on ``sql_warehouse_id``
  (``unity_sql``: polling, and a failure raises ``StatementFailedError`` naming the statement, the error
  and what had already run). A CREATE is preceded by ``CREATE SCHEMA IF NOT EXISTS`` for its schema
  (Databricks refuses a table in a missing schema); its failure names the schema, the table and the fix.
  The primary-raw properties are declared at CREATE only (or on an explicit repair): a live table
  whose properties drifted is refused by the preconditions, never set back.
  A column or nested field name Delta accepts only with column mapping (space , ; { } ( ) newline
  tab =) gets the table ``delta.columnMapping.mode`` = ``name``, whatever its role: at CREATE, or as a
  step run ahead of ``ADD COLUMNS`` on a live table without it; a mode the caller pinned otherwise is
  refused instead.
- ``register_sink``: a ``twg.sink.<id>`` table property.
- ``vend_credentials``: READ, and WRITE (``READ_WRITE``), through ``temporary_table_credentials``. WRITE on
  a MANAGED Delta table raises ``NotSupportedError`` without asking (Unity Catalog vends write credentials
  only for EXTERNAL tables and managed Iceberg tables; Zerobus writes managed tables with OAuth).

Auth goes through databricks-sdk's own ``Config``: OAuth machine-to-machine (service principal id and
secret; the SDK refreshes tokens) or a personal access token.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from databricks.sdk import WorkspaceClient
from databricks.sdk.config import Config
from databricks.sdk.errors import NotFound
from databricks.sdk.errors.base import DatabricksError
from databricks.sdk.service.catalog import TableInfo
from pydantic import SecretStr

from zerobus_orchestration._version import __version__
from zerobus_orchestration.catalog.base import (
    CHARS_NEEDING_COLUMN_MAPPING,
    COLUMN_MAPPING_MODE,
    PROP_ROLE,
    Access,
    DesiredTable,
    PositionsHeldTwice,
    ReconcileOutcome,
    RowsOfSources,
    TableLocation,
    TableState,
    VendedCredentials,
    primary_raw_properties,
)
from zerobus_orchestration.catalog.ddl import (
    create_schema_sql,
    delete_rows_sql,
    describe_detail_sql,
    keep_one_copy_sql,
    latest_history_sql,
    render_plan,
    set_properties_sql,
)
from zerobus_orchestration.catalog.plan import (
    ReconcilePlan,
    Refuse,
    WidenColumn,
    column_mapping_after,
    names_needing_column_mapping,
    plan,
    unsendable_refusals,
)
from zerobus_orchestration.catalog.unity_credentials import vend_table_credentials
from zerobus_orchestration.catalog.unity_sql import (
    DEFAULT_POLLING,
    MAPPING_CHARS_TEXT,
    StatementRunner,
    lost_a_race,
)

# Re-exported: callers build a ``UnityCatalog(..., polling=StatementPolling(...))`` from this module.
from zerobus_orchestration.catalog.unity_sql import StatementPolling as StatementPolling
from zerobus_orchestration.catalog.unity_tables import (
    json_map,
    live_column,
    opt_int,
    protocol_of,
    user_properties,
)
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.errors import (
    CatalogError,
    ConfigError,
    StatementFailedError,
)
from zerobus_orchestration.tables import TableName

SINK_PREFIX = "twg.sink."
TYPE_WIDENING = "delta.enableTypeWidening"
_SINK_ID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_DELETE_ATTEMPTS = 3


@dataclass(frozen=True)
class UniformStatus:
    """Unity Catalog's record of the asynchronous Iceberg conversion (``delta_uniform_iceberg``)."""

    converted_delta_version: int | None
    converted_delta_timestamp: int | None
    metadata_location: str | None


def workspace_client(
    workspace_url: str,
    *,
    client_id: str | None = None,
    client_secret: SecretStr | str | None = None,
    token: SecretStr | str | None = None,
    retry_timeout_seconds: int | None = None,
) -> WorkspaceClient:
    """A ``WorkspaceClient`` on databricks-sdk's own ``Config``: PAT if ``token`` is given, else OAuth M2M."""
    options: dict[str, Any] = {"host": workspace_url}
    if retry_timeout_seconds is not None:
        options["retry_timeout_seconds"] = retry_timeout_seconds
    if token is not None:
        options.update(token=_reveal(token), auth_type="pat")
    elif client_id and client_secret is not None:
        options.update(client_id=client_id, client_secret=_reveal(client_secret), auth_type="oauth-m2m")
    else:
        raise ConfigError(
            f"unity catalog at {workspace_url}: set zerobus.client_id and zerobus.client_secret "
            "(OAuth service principal) or pass a personal access token"
        )
    config = Config(product="zerobus-orchestration", product_version=__version__, **options)
    return WorkspaceClient(config=config)


def _reveal(value: SecretStr | str) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


class UnityCatalog:
    """``TableCatalog`` on Unity Catalog. Build with ``UnityCatalog.from_config`` or from a client."""

    def __init__(
        self,
        client: WorkspaceClient,
        warehouse_id: str,
        *,
        allow_widening: bool = False,
        polling: StatementPolling = DEFAULT_POLLING,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not warehouse_id:
            raise ConfigError("unity catalog: zerobus.catalog.sql_warehouse_id is required to run DDL")
        self._client = client
        self._allow_widening = allow_widening
        self._sql = StatementRunner(client, warehouse_id, polling=polling, sleep=sleep, clock=clock)

    @classmethod
    def from_config(
        cls,
        config: ZerobusConfig,
        *,
        token: SecretStr | str | None = None,
        retry_timeout_seconds: int | None = None,
        polling: StatementPolling = DEFAULT_POLLING,
    ) -> UnityCatalog:
        if not config.workspace_url:
            raise ConfigError("unity catalog: zerobus.workspace_url is required")
        if not config.catalog.sql_warehouse_id:
            raise ConfigError("unity catalog: zerobus.catalog.sql_warehouse_id is required to run DDL")
        client = workspace_client(
            config.workspace_url,
            client_id=config.client_id,
            client_secret=config.client_secret,
            token=token,
            retry_timeout_seconds=retry_timeout_seconds,
        )
        return cls(
            client,
            config.catalog.sql_warehouse_id,
            allow_widening=config.catalog.allow_widening,
            polling=polling,
        )

    @property
    def client(self) -> WorkspaceClient:
        return self._client

    # -- describe ---------------------------------------------------------------------------------

    def describe(self, table: str) -> TableState | None:
        name = TableName.parse(table)
        raw = self._raw_table(name)
        if raw is None:
            return None
        info = TableInfo.from_dict(raw)
        detail = self._describe_detail(name)
        properties = user_properties(info.properties or {})
        properties.update(user_properties(json_map(detail.get("properties"))))
        role_value = properties.get(PROP_ROLE)
        return TableState(
            name=name.full_name,
            columns=tuple(live_column(name, c) for c in info.columns or ()),
            properties=properties,
            protocol=protocol_of(detail),
            table_id=info.table_id,
            location=info.storage_location,
            version=self._version(name),
            registered=True,
            role=Role(role_value) if role_value in {r.value for r in Role} else None,
            sinks=tuple(sorted(k[len(SINK_PREFIX) :] for k in properties if k.startswith(SINK_PREFIX))),
        )

    def locate(self, table: str) -> TableLocation | None:
        name = TableName.parse(table)
        raw = self._raw_table(name)
        if raw is None:
            return None
        return TableLocation(name.full_name, TableInfo.from_dict(raw).storage_location, registered=True)

    def latest_version(self, table: str) -> int | None:
        name = TableName.parse(table)
        # The REST call says whether the table exists: the history statement fails on a missing one.
        return None if self._raw_table(name) is None else self._version(name)

    def uniform_status(self, table: str) -> UniformStatus | None:
        """``converted_delta_version`` and friends, or ``None`` when UniForm has produced nothing yet."""
        raw = self._raw_table(TableName.parse(table))
        block = (raw or {}).get("delta_uniform_iceberg")
        if not isinstance(block, Mapping):
            return None
        return UniformStatus(
            converted_delta_version=opt_int(block.get("converted_delta_version")),
            converted_delta_timestamp=opt_int(block.get("converted_delta_timestamp")),
            metadata_location=block.get("metadata_location"),
        )

    def visibility_probe(self) -> UniformVersionProbe:
        """Read-back's probe: which Delta version UniForm has converted to Iceberg so far."""
        return UniformVersionProbe(self)

    def _raw_table(self, name: TableName) -> dict[str, Any] | None:
        path = "/api/2.1/unity-catalog/tables/" + quote(name.full_name, safe="")
        try:
            raw = self._client.api_client.do("GET", path)
        except NotFound:
            return None
        except DatabricksError as exc:
            raise CatalogError(f"unity catalog: cannot read table {name}: {exc}") from exc
        if not isinstance(raw, dict):
            raise CatalogError(f"unity catalog: unexpected response for table {name}: {raw!r}")
        return raw

    def _describe_detail(self, name: TableName) -> dict[str, Any]:
        rows = self._sql.query(describe_detail_sql(name))
        if not rows:
            raise CatalogError(f"DESCRIBE DETAIL {name} returned no row")
        return rows[0]

    def _version(self, name: TableName) -> int | None:
        rows = self._sql.query(latest_history_sql(name))
        return opt_int(rows[0].get("version")) if rows else None

    # -- reconcile --------------------------------------------------------------------------------

    def plan(self, table: str, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute now, without executing it."""
        return self._plan(table, desired)[1]

    def planned_statements(self, table: str, desired: DesiredTable) -> list[str]:
        """The SQL ``reconcile`` would run now (a dry run); raises ``PlanRefusedError`` like reconcile."""
        live, steps = self._plan(table, desired)
        return self._statements(table, live, steps)

    def reconcile(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        try:
            outcome = self._reconcile_once(table, desired)
        except StatementFailedError as failure:
            if not lost_a_race(failure):
                raise
            # Another producer created or evolved the table between our describe and our DDL (two
            # writers adding one column: ours fails FIELDS_ALREADY_EXISTS). Re-plan against what is
            # there now, once; a second failure is real and propagates.
            return self._reconcile_once(table, desired)
        if outcome.plan.creates and not self.plan_against(outcome.state, desired).empty:
            # CREATE TABLE IF NOT EXISTS is a silent no-op when another producer created the table
            # first, perhaps with fewer columns: converge on the table that is really there.
            return self._reconcile_once(table, desired)
        return outcome

    def _reconcile_once(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        name = TableName.parse(table)
        live, steps = self._plan(table, desired)
        statements = self._statements(table, live, steps)  # raises PlanRefusedError before anything runs
        if steps.empty and live is not None:  # an absent table always plans a CREATE
            return ReconcileOutcome(steps, False, live.version, live, steps.notes)
        if steps.creates:
            self._create_schema(name)
        self.execute(statements)
        after = self.describe(table)
        if after is None:
            raise CatalogError(f"reconcile of {name}: the table is missing after the DDL ran")
        return ReconcileOutcome(steps, True, live.version if live else None, after, steps.notes)

    def _create_schema(self, name: TableName) -> None:
        """The table's schema, before its ``CREATE TABLE``: Databricks answers ``SCHEMA_NOT_FOUND`` for a
        table in a missing schema. Only when creating, so a reconcile of an existing table needs no
        CREATE SCHEMA privilege."""
        schema = f"{name.catalog}.{name.schema}"
        try:
            self.execute([create_schema_sql(name)])
        except StatementFailedError as failure:
            raise StatementFailedError(
                f"cannot create schema {schema} for table {name}: {failure}\n"
                f"  fix: have an admin create the schema (CREATE SCHEMA {schema}), or grant this "
                f"principal CREATE SCHEMA (and USE CATALOG) on catalog {name.catalog}",
                statement=failure.statement,
                state=failure.state,
                error_code=failure.error_code,
                sql_error_class=failure.sql_error_class,
                error_message=failure.error_message,
                executed=failure.executed,
            ) from failure

    def _plan(self, table: str, desired: DesiredTable) -> tuple[TableState | None, ReconcilePlan]:
        name = TableName.parse(table)
        if TableName.parse(desired.name) != name:
            raise CatalogError(f"reconcile of {name}: the desired table is {desired.name}")
        live = self.describe(table)
        return live, self.plan_against(live, desired)

    def plan_against(self, live: TableState | None, desired: DesiredTable) -> ReconcilePlan:
        """The plan ``reconcile`` would execute against ``live`` (a ``describe`` of the table), without
        reading the catalog again."""
        if desired.role is Role.PRIMARY_RAW:
            # At CREATE (or on an explicit repair) only: a drifted live value is refused by the
            # preconditions, never set back behind the user's back.
            desired = desired.with_role_properties(primary_raw_properties(real_column_mapping=True))
        allow_widening = desired.allow_widening or self._allow_widening
        steps = plan(live, desired, allow_widening=allow_widening)
        needing = names_needing_column_mapping(steps.steps)
        if not needing or column_mapping_after(live, steps):
            return _with_unsendable_refused(live, steps)
        pinned = desired.properties.get(COLUMN_MAPPING_MODE)
        if pinned is not None:
            # The caller asked for this mode explicitly: overriding it silently would be worse than
            # saying which names clash with it.
            refusals = tuple(_clashes_with_pinned_mode(steps.table, name, pinned) for name in needing)
            return ReconcilePlan(steps.table, refusals + steps.steps, steps.notes)
        # Any role: a table without column mapping cannot hold these names at all (Delta error class
        # DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES), so the table gets column mapping instead of a
        # plan that only fails once it reaches the warehouse.
        mapped = plan(
            live, desired.with_properties({COLUMN_MAPPING_MODE: "name"}), allow_widening=allow_widening
        )
        note = (
            f"{steps.table}: column mapping 'name' is turned on because {_quoted(needing)} contain "
            f"characters Delta allows in column names only with column mapping ({MAPPING_CHARS_TEXT})"
        )
        return _with_unsendable_refused(
            live, ReconcilePlan(mapped.table, mapped.steps, (*mapped.notes, note))
        )

    @staticmethod
    def _statements(table: str, live: TableState | None, steps: ReconcilePlan) -> list[str]:
        statements = render_plan(steps)
        widening = any(isinstance(s, WidenColumn) for s in steps.steps)
        if widening and live is not None and live.properties.get(TYPE_WIDENING, "").lower() != "true":
            # Databricks refuses ALTER COLUMN TYPE until type widening is enabled on the table.
            statements.insert(
                0, set_properties_sql(TableName.parse(table).full_name, {TYPE_WIDENING: "true"})
            )
        return statements

    def execute(self, statements: Sequence[str]) -> None:
        """Run ``statements`` in order; the first that does not succeed raises ``StatementFailedError``."""
        done: list[str] = []
        for statement in statements:
            self._sql.run(statement, done)
            done.append(statement)

    def register_sink(self, table: str, sink_id: str) -> None:
        if not _SINK_ID.fullmatch(sink_id):
            raise ConfigError(
                f"sink id {sink_id!r} for table {table}: use 1-128 characters from letters, digits, "
                "'_', '.' and '-'"
            )
        name = TableName.parse(table)
        state = self.describe(table)
        if state is None:
            raise CatalogError(f"register_sink: table {name} does not exist; reconcile it first")
        if sink_id in state.sinks:
            return  # idempotent: no statement, no new table version
        self.execute([set_properties_sql(name.full_name, {SINK_PREFIX + sink_id: "registered"})])

    def delete_rows(self, table: str, rows: RowsOfSources) -> None:
        """``DELETE FROM`` through the SQL warehouse; a commit that lost to a concurrent one is re-run."""
        statement = delete_rows_sql(TableName.parse(table).full_name, rows)
        for attempt in range(_DELETE_ATTEMPTS):
            try:
                self.execute([statement])
                return
            except StatementFailedError as failure:
                # Zerobus appends while we delete; Delta's conflict check may fail our commit. The
                # statement is idempotent (it names the superseded tags), so re-running it is safe.
                if not lost_a_race(failure) or attempt == _DELETE_ATTEMPTS - 1:
                    raise

    def keep_one_copy(self, table: str, positions: PositionsHeldTwice) -> None:
        """One ``INSERT INTO ... REPLACE WHERE`` through the SQL warehouse, re-run on a lost race (it
        replaces the same positions with one copy each, so re-running it is safe)."""
        statement = keep_one_copy_sql(TableName.parse(table).full_name, positions)
        for attempt in range(_DELETE_ATTEMPTS):
            try:
                self.execute([statement])
                return
            except StatementFailedError as failure:
                if not lost_a_race(failure) or attempt == _DELETE_ATTEMPTS - 1:
                    raise

    # -- credentials ------------------------------------------------------------------------------

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        name = TableName.parse(table)
        return vend_table_credentials(self._client, name, self._raw_table(name), access)


def _with_unsendable_refused(live: TableState | None, steps: ReconcilePlan) -> ReconcilePlan:
    """``steps`` with the columns Zerobus' Arrow path cannot carry refused first (``unsendable_refusals``)."""
    refusals = unsendable_refusals(live, steps)
    return ReconcilePlan(steps.table, refusals + steps.steps, steps.notes) if refusals else steps


def _clashes_with_pinned_mode(table: str, name: str, pinned: str) -> Refuse:
    safe = "".join("_" if ch in CHARS_NEEDING_COLUMN_MAPPING else ch for ch in name.split(".")[-1])
    return Refuse(
        table,
        name,
        f"the name contains characters ({MAPPING_CHARS_TEXT}) that Delta allows only with column mapping "
        f"(DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES), but the desired properties pin "
        f"'{COLUMN_MAPPING_MODE}' = {pinned!r}; rename it (e.g. {safe!r}) or set "
        f"'{COLUMN_MAPPING_MODE}' = 'name'",
    )


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


class UniformVersionProbe:
    """``readback.VisibilityProbe`` over UniForm's ``converted_delta_version``.

    Unity Catalog's Iceberg snapshots carry no Delta version, so read-back asks the table instead; a
    table UniForm has not converted yet reads as "not visible".
    """

    def __init__(self, catalog: UnityCatalog) -> None:
        self._catalog = catalog

    def converted_delta_version(self, table: str) -> int | None:
        status = self._catalog.uniform_status(table)
        return None if status is None else status.converted_delta_version
