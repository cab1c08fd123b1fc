"""The ``unity`` backend against the fake Unity Catalog (real databricks-sdk underneath)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pydantic import SecretStr

from zerobus_orchestration.catalog.base import Access, DesiredTable, TableState
from zerobus_orchestration.catalog.plan import SetProperty
from zerobus_orchestration.catalog.preconditions import check_primary_raw, unmet
from zerobus_orchestration.catalog.unity import (
    StatementPolling,
    UnityCatalog,
    workspace_client,
)
from zerobus_orchestration.config import CatalogBackend, CatalogConfig, Role, ZerobusConfig
from zerobus_orchestration.emulator.unity.state import FakeTable
from zerobus_orchestration.errors import (
    CatalogError,
    ConfigError,
    NotSupportedError,
    PlanRefusedError,
    StatementFailedError,
    UnsupportedType,
)
from zerobus_orchestration.testing import FakeUnityCatalog
from zerobus_orchestration.testing.uc_fake import IssuedCredentials, SyntheticIssuer

TABLE = "main.raw.events"


def schema(*extra: pa.Field) -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), *extra])


def desired(*extra: pa.Field, role: Role = Role.PRIMARY_RAW, **kwargs: object) -> DesiredTable:
    return DesiredTable.build(TABLE, schema(*extra), role, **kwargs)  # type: ignore[arg-type]


def submitted(uc: FakeUnityCatalog) -> int:
    """Statements submitted so far (DDL and the describe reads)."""
    return sum(1 for r in uc.requests if r.method == "POST" and r.path == "/api/2.0/sql/statements")


def test_describe_absent_table_is_none(unity: UnityCatalog) -> None:
    assert unity.describe(TABLE) is None


def test_locate_and_latest_version_read_less_than_describe_and_agree_with_it(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    before = submitted(fake_uc)
    assert unity.locate(TABLE) is None and unity.latest_version(TABLE) is None
    assert submitted(fake_uc) == before  # a missing table is answered by the REST call alone
    unity.reconcile(TABLE, desired())
    unity.reconcile(TABLE, desired(pa.field("extra", pa.int32())))  # a second version
    state = unity.describe(TABLE)
    assert state is not None and state.version == 1
    before = submitted(fake_uc)
    located = unity.locate(TABLE)
    assert submitted(fake_uc) == before  # no SQL statement: describe runs two
    assert located is not None and located.registered
    assert (located.name, located.location) == (state.name, state.location)
    assert unity.latest_version(TABLE) == state.version
    assert submitted(fake_uc) == before + 1


def test_primary_raw_reconcile_creates_a_real_uniform_table(unity: UnityCatalog) -> None:
    outcome = unity.reconcile(TABLE, desired(descriptions={"id": "Event id, it's 'unique'"}))
    assert outcome.applied and outcome.plan.creates and outcome.version_before is None
    state = outcome.state
    assert state.registered and state.role is Role.PRIMARY_RAW and state.version == 0
    assert state.properties["delta.enableIcebergCompatV2"] == "true"
    assert state.properties["delta.universalFormat.enabledFormats"] == "iceberg"
    assert state.properties["delta.columnMapping.mode"] == "name"
    assert state.properties["delta.enableDeletionVectors"] == "false"
    assert "delta.minReaderVersion" not in state.properties  # protocol keys live in state.protocol
    assert (state.protocol.min_reader_version, state.protocol.min_writer_version) == (2, 7)
    assert {"columnMapping", "icebergCompatV2"} <= state.protocol.writer_features
    id_col = state.column("id")
    assert id_col is not None and id_col.delta_type == "BIGINT" and not id_col.nullable
    assert id_col.comment is not None and id_col.comment.startswith("Event id, it's 'unique' [twg:managed")
    assert state.table_id and state.location and state.table_id in state.location
    assert [c.name for c in check_primary_raw(unity, TABLE) if c.ok] == [
        "registered",
        "iceberg_reads",
        "column_mapping",
        "protocol",
        "deletion_vectors_disabled",
    ]


def test_second_reconcile_is_a_no_op_without_ddl(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    first = unity.reconcile(TABLE, desired(descriptions={"id": "Event id"}))
    before = submitted(fake_uc)
    again = unity.reconcile(TABLE, desired(descriptions={"id": "Event id"}))
    assert not again.applied and again.plan.empty
    assert again.version_before == again.version_after == first.version_after
    table = fake_uc.table(TABLE)
    assert table is not None and table.version == 0
    # Only the describe reads (DESCRIBE DETAIL + DESCRIBE HISTORY) were submitted.
    assert submitted(fake_uc) - before == 2


def test_evolution_adds_columns_and_rewrites_changed_descriptions(unity: UnityCatalog) -> None:
    unity.reconcile(TABLE, desired(descriptions={"id": "v1"}))
    outcome = unity.reconcile(TABLE, desired(pa.field("amount", pa.float64()), descriptions={"id": "v2"}))
    kinds = [s.kind for s in outcome.plan.steps]
    assert kinds == ["add_column", "set_comment"]
    assert outcome.version_before == 0 and outcome.version_after == 2
    amount = outcome.state.column("amount")
    assert amount is not None and amount.delta_type == "DOUBLE" and amount.nullable
    id_col = outcome.state.column("id")
    assert id_col is not None and id_col.comment is not None and id_col.comment.startswith("v2 [twg:managed")


def test_human_edited_comment_is_kept_under_respect(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    unity.reconcile(TABLE, desired(descriptions={"id": "v1"}))
    fake_uc.execute_sql(f"COMMENT ON COLUMN {TABLE}.id IS 'curated by a human [twg:managed h=00000000]'")
    outcome = unity.reconcile(TABLE, desired(descriptions={"id": "v2"}))
    assert outcome.plan.empty and not outcome.applied
    assert any("edited outside the catalog" in n for n in outcome.notes)
    col = outcome.state.column("id")
    assert col is not None and col.comment == "curated by a human [twg:managed h=00000000]"


def test_failed_statement_raises_naming_statement_and_error(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    unity.reconcile(TABLE, desired())
    # A user-supplied property that Databricks refuses on a UniForm table: the SDK does not raise, we do.
    wanted = desired(properties={"delta.enableDeletionVectors": "true"})
    with pytest.raises(StatementFailedError) as info:
        unity.reconcile(TABLE, wanted)
    err = info.value
    assert err.state == "FAILED"
    assert err.sql_error_class == "DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_SHOULD_BE_DISABLED"
    assert err.statement.startswith("ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES")
    assert err.statement in str(err) and "DELETION_VECTORS_SHOULD_BE_DISABLED" in str(err)
    assert "delta.enableDeletionVectors' = 'false'" in str(err)  # the fix
    assert isinstance(err, CatalogError)


def test_failure_midway_reports_what_already_ran(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    unity.reconcile(TABLE, desired(descriptions={"id": "v1"}))
    fake_uc.fail_next_statement("INTERNAL_ERROR", "warehouse lost", matching="ALTER COLUMN")
    with pytest.raises(StatementFailedError) as info:
        unity.reconcile(TABLE, desired(pa.field("amount", pa.float64()), descriptions={"id": "v2"}))
    err = info.value
    assert "ALTER COLUMN `id` COMMENT" in err.statement
    assert err.error_code == "INTERNAL_ERROR" and "warehouse lost" in str(err)
    assert len(err.executed) == 1 and "ADD COLUMNS" in err.executed[0]
    # Re-running converges: the added column is already there, only the comment is still to do.
    outcome = unity.reconcile(TABLE, desired(pa.field("amount", pa.float64()), descriptions={"id": "v2"}))
    assert [s.kind for s in outcome.plan.steps] == ["set_comment"]


def test_refusal_raises_before_any_statement(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    unity.reconcile(TABLE, desired(pa.field("amount", pa.int32())))
    before = submitted(fake_uc)
    narrowed = DesiredTable.build(
        TABLE,
        pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.int32())]),  # drops name
        Role.PRIMARY_RAW,
    )
    with pytest.raises(PlanRefusedError) as info:
        unity.reconcile(TABLE, narrowed)
    assert any("name" in r for r in info.value.reasons)
    assert submitted(fake_uc) - before == 2  # the describe reads only; no DDL


def test_widening_refused_unless_opted_in_then_enables_type_widening(unity: UnityCatalog) -> None:
    unity.reconcile(TABLE, desired(pa.field("amount", pa.int32())))
    with pytest.raises(PlanRefusedError, match="widening"):
        unity.reconcile(TABLE, desired(pa.field("amount", pa.int64())))
    outcome = unity.reconcile(TABLE, desired(pa.field("amount", pa.int64()), allow_widening=True))
    amount = outcome.state.column("amount")
    assert amount is not None and amount.delta_type == "BIGINT"
    assert outcome.state.properties["delta.enableTypeWidening"] == "true"
    assert "typeWidening" in outcome.state.protocol.features


def test_statements_are_polled_with_backoff(fake_uc: FakeUnityCatalog) -> None:
    fake_uc.statement_pending_polls = 3
    sleeps: list[float] = []
    client = workspace_client(fake_uc.url, token=fake_uc.pat, retry_timeout_seconds=5)
    polling = StatementPolling(wait_timeout="0s", poll_initial_s=0.1, poll_max_s=0.3, deadline_s=60)
    catalog = UnityCatalog(client, fake_uc.warehouse_id, polling=polling, sleep=sleeps.append)
    outcome = catalog.reconcile(TABLE, desired())
    assert outcome.applied and outcome.state.version == 0
    # CREATE SCHEMA, CREATE, then describe's DETAIL and HISTORY: four statements, each PENDING then
    # RUNNING 3 polls.
    assert sleeps[:4] == [0.1, 0.2, 0.3, 0.3] and len(sleeps) == 16


def test_statement_past_its_deadline_is_cancelled_and_raised(fake_uc: FakeUnityCatalog) -> None:
    fake_uc.statement_pending_polls = 1000
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = workspace_client(fake_uc.url, token=fake_uc.pat, retry_timeout_seconds=5)
    polling = StatementPolling(wait_timeout="0s", poll_initial_s=1, poll_max_s=1, deadline_s=3)
    catalog = UnityCatalog(client, fake_uc.warehouse_id, polling=polling, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(StatementFailedError, match="did not finish in 3s") as info:
        catalog.execute(["CREATE TABLE main.raw.t (id INT)"])
    assert info.value.state in ("RUNNING", "PENDING")
    assert any(r.path.endswith("/cancel") for r in fake_uc.requests)


def test_register_sink_is_an_idempotent_table_property(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    unity.reconcile(TABLE, desired())
    unity.register_sink(TABLE, "dagster.events-1")
    version = fake_uc.table(TABLE).version  # type: ignore[union-attr]
    unity.register_sink(TABLE, "dagster.events-1")
    assert fake_uc.table(TABLE).version == version  # type: ignore[union-attr]
    state = unity.describe(TABLE)
    assert state is not None and state.sinks == ("dagster.events-1",)
    assert state.properties["twg.sink.dagster.events-1"] == "registered"
    with pytest.raises(ConfigError, match="sink id"):
        unity.register_sink(TABLE, "bad id'; DROP")
    with pytest.raises(CatalogError, match="does not exist"):
        unity.register_sink("main.raw.nope", "x")


def test_vend_read_credentials_and_refuse_write(unity: UnityCatalog) -> None:
    unity.reconcile(TABLE, desired())
    creds = unity.vend_credentials(TABLE, Access.READ)
    assert creds.access is Access.READ and creds.table == TABLE
    assert creds.expires_at.tzinfo is not None and creds.expires_at > datetime.now(UTC)
    assert set(creds.storage_options) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    assert all(isinstance(v, SecretStr) for v in creds.storage_options.values())
    assert "ASIA" not in repr(creds)  # secrets stay masked
    with pytest.raises(NotSupportedError, match="MANAGED DELTA table, and Unity Catalog vends write"):
        unity.vend_credentials(TABLE, Access.WRITE)


@dataclass
class RecordingIssuer:
    """The fake's synthetic keys, remembering which operation each vend asked for."""

    operations: list[tuple[str, str]] = field(default_factory=list)

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials:
        self.operations.append((table.full_name, operation))
        return SyntheticIssuer().issue(table, operation)


def test_vend_write_credentials_for_an_external_table(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    # Unity Catalog refuses write credentials only for managed Delta tables; an EXTERNAL one gets them.
    issuer = RecordingIssuer()
    fake_uc.credential_issuer = issuer
    fake_uc.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT) USING DELTA LOCATION 's3://lake/events'")
    creds = unity.vend_credentials(TABLE, Access.WRITE)
    assert creds.access is Access.WRITE and creds.url == "s3://lake/events"
    assert set(creds.storage_options) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    assert issuer.operations == [(TABLE, "READ_WRITE")]
    unity.vend_credentials(TABLE, Access.READ)
    assert issuer.operations[-1] == (TABLE, "READ")


def test_managed_write_refusal_asks_unity_catalog_nothing(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    issuer = RecordingIssuer()
    fake_uc.credential_issuer = issuer
    unity.reconcile(TABLE, desired())
    with pytest.raises(NotSupportedError, match=rf"{TABLE}: it is a MANAGED DELTA table.*Zerobus"):
        unity.vend_credentials(TABLE, Access.WRITE)
    assert issuer.operations == []
    assert not any("temporary-table-credentials" in r.path for r in fake_uc.requests)


def test_uniform_status_tracks_converted_delta_version(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    assert unity.uniform_status(TABLE) is None
    unity.reconcile(TABLE, desired())
    fake_uc.hold_uniform_conversion = True
    fake_uc.simulate_commit(TABLE)
    status = unity.uniform_status(TABLE)
    assert status is not None and status.converted_delta_version == 0
    fake_uc.convert_uniform(TABLE)
    status = unity.uniform_status(TABLE)
    assert status is not None and status.converted_delta_version == 1 and status.metadata_location


def test_preconditions_name_every_unmet_condition(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    fake_uc.execute_sql(
        f"CREATE TABLE {TABLE} (id BIGINT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    missing = {c.name for c in unmet(check_primary_raw(unity, TABLE))}
    assert missing == {"iceberg_reads", "column_mapping", "protocol", "deletion_vectors_disabled"}
    state = unity.describe(TABLE)
    assert state is not None and state.protocol.min_reader_version == 3
    assert "deletionVectors" in state.protocol.reader_features


def test_from_config_with_pat_and_oauth(fake_uc: FakeUnityCatalog) -> None:
    base = ZerobusConfig(
        workspace_url=fake_uc.url,
        catalog=CatalogConfig(backend=CatalogBackend.UNITY, sql_warehouse_id=fake_uc.warehouse_id),
    )
    pat = UnityCatalog.from_config(base, token=SecretStr(fake_uc.pat), retry_timeout_seconds=5)
    assert pat.describe(TABLE) is None
    assert fake_uc.requests[-1].auth == "pat"
    oauth_config = base.model_copy(
        update={"client_id": fake_uc.client_id, "client_secret": SecretStr(fake_uc.client_secret)}
    )
    oauth = UnityCatalog.from_config(oauth_config, retry_timeout_seconds=5)
    assert oauth.describe(TABLE) is None
    assert fake_uc.requests[-1].auth == "oauth" and fake_uc.tokens_issued == 1


def test_from_config_errors_name_the_missing_keys(fake_uc: FakeUnityCatalog) -> None:
    with pytest.raises(ConfigError, match="workspace_url"):
        UnityCatalog.from_config(ZerobusConfig(catalog=CatalogConfig(sql_warehouse_id="w")))
    with pytest.raises(ConfigError, match="sql_warehouse_id"):
        UnityCatalog.from_config(ZerobusConfig(workspace_url=fake_uc.url))
    with pytest.raises(ConfigError, match=r"client_id and zerobus\.client_secret"):
        UnityCatalog.from_config(
            ZerobusConfig(workspace_url=fake_uc.url, catalog=CatalogConfig(sql_warehouse_id="w"))
        )


def test_hostile_names_and_comments_round_trip_through_sql(unity: UnityCatalog) -> None:
    # A table name Zerobus cannot hold is refused by ``TableName`` (tests/unit/zerobus_orchestration/test_tables.py); the
    # hostile parts here are the columns and the comment.
    table = "main.raw.`Odd_Table`"
    columns = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("we`ird name", pa.string()),
            pa.field("nested", pa.struct([("select", pa.int32()), ("x`y", pa.string())])),
        ]
    )
    comment = "it's a \\ 'quote'; DROP TABLE x; --\nsecond line\ttab"
    desired_table = DesiredTable.build(table, columns, Role.DERIVED, descriptions={"we`ird name": comment})
    outcome = unity.reconcile(table, desired_table)
    state = outcome.state
    assert state.name == "main.raw.odd_table"  # backticks are quoting; Unity Catalog folds case
    # "we`ird name" has a space: a Delta table holds it only with column mapping, even a derived one.
    assert state.properties["delta.columnMapping.mode"] == "name"
    weird = state.column("we`ird name")
    assert (
        weird is not None
        and weird.comment is not None
        and weird.comment.startswith(comment + " [twg:managed")
    )
    nested = state.column("nested")
    assert nested is not None and nested.arrow_type == pa.struct(
        [("select", pa.int32()), ("x`y", pa.string())]
    )
    assert unity.reconcile(table, desired_table).plan.empty


def test_unknown_warehouse_is_a_catalog_error_naming_the_statement(fake_uc: FakeUnityCatalog) -> None:
    client = workspace_client(fake_uc.url, token=fake_uc.pat, retry_timeout_seconds=5)
    catalog = UnityCatalog(client, "no-such-warehouse")
    with pytest.raises(CatalogError, match=r"SQL warehouse no-such-warehouse.*\n  statement: ALTER TABLE"):
        catalog.execute(["ALTER TABLE main.raw.t ADD COLUMNS (a INT)"])


def test_adopting_a_plain_table_as_primary_raw_upgrades_it_only_on_an_explicit_repair(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    fake_uc.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name STRING)")
    # Without repair the primary-raw properties are not set on a live table: the preconditions refuse it.
    plain = unity.reconcile(TABLE, desired())
    assert {(s.key, s.value) for s in plain.plan.steps if isinstance(s, SetProperty)} == {
        ("twg.role", "primary_raw")
    }
    assert {c.name for c in unmet(check_primary_raw(unity, TABLE))} == {
        "iceberg_reads",
        "column_mapping",
        "protocol",
    }
    outcome = unity.reconcile(TABLE, desired(repair=True))
    assert "delta.enableIcebergCompatV2" in {s.key for s in outcome.plan.steps if isinstance(s, SetProperty)}
    assert unmet(check_primary_raw(unity, TABLE)) == []


def test_adopting_a_deletion_vector_table_leaves_the_feature_to_purge(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    fake_uc.execute_sql(
        f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name STRING) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    unity.reconcile(TABLE, desired(repair=True))  # turns the property off and UniForm on, one statement
    missing = unmet(check_primary_raw(unity, TABLE))
    assert [c.name for c in missing] == ["deletion_vectors_disabled"]
    assert "feature is active" in missing[0].detail and "PURGE" in missing[0].detail


def test_a_column_type_we_cannot_map_names_table_and_column(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    fake_uc.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT, v VARIANT)")
    with pytest.raises(UnsupportedType, match=r"table main\.raw\.events, column 'v'"):
        unity.describe(TABLE)


def test_dry_run_plan_and_sql_execute_nothing(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    unity.reconcile(TABLE, desired(pa.field("n", pa.int32())))
    wanted = desired(pa.field("n", pa.int64()), pa.field("extra", pa.string()), allow_widening=True)
    assert [s.kind for s in unity.plan(TABLE, wanted).steps] == ["add_column", "widen_column"]
    statements = unity.planned_statements(TABLE, wanted)
    assert statements == [
        "ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
        "ALTER TABLE `main`.`raw`.`events` ADD COLUMNS (`extra` STRING)",
        "ALTER TABLE `main`.`raw`.`events` ALTER COLUMN `n` TYPE BIGINT",
    ]
    assert fake_uc.table(TABLE).version == 0  # type: ignore[union-attr]


def test_visibility_probe_follows_uniform_conversion_for_read_back(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    from zerobus_orchestration.errors import ReadbackTimeoutError
    from zerobus_orchestration.readback import WaitPolicy, wait_for_delta_version

    probe = unity.visibility_probe()
    assert probe.converted_delta_version(TABLE) is None  # no table yet: not visible
    unity.reconcile(TABLE, desired())
    fake_uc.hold_uniform_conversion = True
    written = fake_uc.simulate_commit(TABLE)
    fast = WaitPolicy(timeout_s=0.3, initial_s=0.05, max_s=0.1)
    with pytest.raises(ReadbackTimeoutError, match=f"Delta version {written}"):
        wait_for_delta_version(probe, TABLE, written, fast)
    fake_uc.convert_uniform(TABLE)
    assert wait_for_delta_version(probe, TABLE, written, fast).delta_version == written


def _another_producer_acts_after_our_describe(
    unity: UnityCatalog, monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]
) -> None:
    """``unity``'s next describe reads the table, then ``act`` (another producer) changes it: a race."""
    real_describe = unity.describe
    raced: list[bool] = []

    def describe_then_lose_the_race(table: str) -> TableState | None:
        state = real_describe(table)
        if not raced:
            raced.append(True)
            act()
        return state

    monkeypatch.setattr(unity, "describe", describe_then_lose_the_race)


def test_losing_an_add_column_race_re_plans_and_converges(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    unity.reconcile(TABLE, desired())
    wanted = desired(pa.field("amount", pa.float64()), pa.field("note", pa.string()))
    _another_producer_acts_after_our_describe(
        unity, monkeypatch, lambda: fake_uc.execute_sql(f"ALTER TABLE {TABLE} ADD COLUMNS (amount DOUBLE)")
    )
    outcome = unity.reconcile(TABLE, wanted)
    assert [s.kind for s in outcome.plan.steps] == ["add_column"]  # only `note` was left to add
    assert {"amount", "note"} <= {c.name for c in outcome.state.columns}
    assert unity.plan(TABLE, wanted).empty


def test_a_failure_that_is_not_a_race_is_not_retried(unity: UnityCatalog, fake_uc: FakeUnityCatalog) -> None:
    unity.reconcile(TABLE, desired())
    fake_uc.fail_next_statement("INTERNAL_ERROR", "warehouse lost", matching="ADD COLUMNS")
    with pytest.raises(StatementFailedError, match="warehouse lost"):
        unity.reconcile(TABLE, desired(pa.field("amount", pa.float64())))
    state = unity.describe(TABLE)
    assert state is not None and state.column("amount") is None  # one attempt, no silent retry


def test_losing_a_create_race_converges_on_the_table_the_other_producer_made(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other producer creates the table with fewer columns; our CREATE ... IF NOT EXISTS is a no-op.
    # It is a primary-raw producer too, so its CREATE declares the primary-raw properties (creation);
    # a plain table made in that window is not upgraded behind anyone's back (test_precondition_recheck).
    _another_producer_acts_after_our_describe(
        unity,
        monkeypatch,
        lambda: fake_uc.execute_sql(
            f"CREATE TABLE {TABLE} (id BIGINT NOT NULL) TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true', "
            "'delta.universalFormat.enabledFormats' = 'iceberg', 'delta.enableDeletionVectors' = 'false')"
        ),
    )
    outcome = unity.reconcile(TABLE, desired())
    assert outcome.state.column("name") is not None and outcome.state.role is Role.PRIMARY_RAW
    assert unity.plan(TABLE, desired()).empty
    assert unmet(check_primary_raw(unity, TABLE)) == []


ORDERS = "main.sales.orders"


def orders(*fields: pa.Field, **kwargs: object) -> DesiredTable:
    columns = pa.schema([pa.field("id", pa.int64(), nullable=False), *fields])
    return DesiredTable.build(ORDERS, columns, Role.DERIVED, **kwargs)  # type: ignore[arg-type]


def test_derived_table_with_names_delta_refuses_unmapped_is_created_with_column_mapping(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    lines = pa.list_(pa.struct([("unit price", pa.float64()), ("sku", pa.string())]))
    wanted = orders(pa.field("order id", pa.string()), pa.field("lines", lines))
    (create,) = unity.planned_statements(ORDERS, wanted)
    assert "'delta.columnMapping.mode' = 'name'" in create
    outcome = unity.reconcile(ORDERS, wanted)
    state = outcome.state
    assert state.properties["delta.columnMapping.mode"] == "name"
    assert "columnMapping" in state.protocol.features and state.protocol.min_reader_version >= 2
    assert state.role is Role.DERIVED and state.column("order id") is not None
    assert state.arrow_schema().field("lines").type == lines
    assert any("'order id', 'lines.unit price'" in n for n in outcome.notes)
    assert unity.plan(ORDERS, wanted).empty  # the property it added is not re-planned
    # A producer's batch (a subset) on the mapped table plans nothing either.
    assert unity.plan(ORDERS, orders(pa.field("order id", pa.string()), subset=True)).empty


def test_evolving_a_plain_table_with_such_a_name_turns_column_mapping_on_first(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    unity.reconcile(ORDERS, orders(pa.field("amount", pa.float64())))
    table = fake_uc.table(ORDERS)
    assert table is not None and not table.column_mapping_enabled and table.version == 0
    wanted = orders(pa.field("amount", pa.float64()), pa.field("ship to", pa.string()))
    assert [s.describe() for s in unity.plan(ORDERS, wanted).steps] == [
        f"set property delta.columnMapping.mode='name' on {ORDERS} (was None)",
        f"add column ship to STRING to {ORDERS}",
    ]
    assert unity.planned_statements(ORDERS, wanted) == [
        "ALTER TABLE `main`.`sales`.`orders` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
        "ALTER TABLE `main`.`sales`.`orders` ADD COLUMNS (`ship to` STRING)",
    ]
    assert table.version == 0  # the dry run ran nothing
    outcome = unity.reconcile(ORDERS, wanted)
    assert outcome.applied and (outcome.version_before, outcome.version_after) == (0, 2)
    assert outcome.state.properties["delta.columnMapping.mode"] == "name"
    assert outcome.state.column("ship to") is not None and outcome.state.column("amount") is not None
    assert unity.plan(ORDERS, wanted).empty


def test_adopting_a_plain_table_as_primary_raw_maps_columns_before_adding_them(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    fake_uc.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name STRING)")
    wanted = desired(pa.field("zip code", pa.string()), repair=True)
    statements = unity.planned_statements(TABLE, wanted)
    assert len(statements) == 3
    assert statements[0] == (
        "ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    assert statements[1].startswith("ALTER TABLE `main`.`raw`.`events` ADD COLUMNS (`zip code` STRING, ")
    # The UniForm properties follow the columns, as before; column mapping is not set twice.
    assert "'delta.enableIcebergCompatV2' = 'true'" in statements[2]
    assert "delta.columnMapping.mode" not in statements[2]
    outcome = unity.reconcile(TABLE, wanted)
    assert outcome.state.column("zip code") is not None
    assert unmet(check_primary_raw(unity, TABLE)) == []


def test_a_pinned_mode_without_column_mapping_is_refused_naming_table_column_and_fixes(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    wanted = orders(pa.field("order id", pa.string()), properties={"delta.columnMapping.mode": "none"})
    before = submitted(fake_uc)
    with pytest.raises(PlanRefusedError) as info:
        unity.reconcile(ORDERS, wanted)
    (reason,) = info.value.reasons
    assert reason.startswith(f"refuse {ORDERS}.order id: the name contains characters")
    assert "'delta.columnMapping.mode' = 'none'" in reason
    assert "rename it (e.g. 'order_id')" in reason and "set 'delta.columnMapping.mode' = 'name'" in reason
    assert unity.describe(ORDERS) is None
    assert submitted(fake_uc) - before == 0  # refused on the describe alone (absent: no DESCRIBE SQL)


def test_a_wide_table_is_created_naming_its_statistics_columns_through_sql(unity: UnityCatalog) -> None:
    """The property goes through the SQL warehouse's CREATE TABLE and the table keeps it."""
    wide = [pa.field(f"c{i}", pa.int64()) for i in range(30)]
    outcome = unity.reconcile(TABLE, desired(*wide))
    named = outcome.state.properties["delta.dataSkippingStatsColumns"].split(",")
    assert named[:2] == ["id", "name"] and named[-3:] == ["_twg_emit_ts", "_twg_source", "_twg_offset"]
    assert len(named) == 32
    assert [c.name for c in check_primary_raw(unity, TABLE) if not c.ok] == []
