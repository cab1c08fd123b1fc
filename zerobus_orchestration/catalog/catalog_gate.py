"""``CatalogGate``: the sink's ``SchemaGate`` (``sink/schema_gate.py``) over any ``TableCatalog``.

``ensure`` declares what the producer sends (a subset ``DesiredTable`` built from the stamped batch
schema plus reserved columns) and reconciles it: the table is created or evolved, refusals raise
``PlanRefusedError`` before anything is sent. It returns the live Arrow schema, the declared target
every batch is conformed to by the write-boundary guard.

Primary-raw preconditions are re-checked, never repaired:

- on every write: the sink calls ``ensure`` on the first batch it meets (``ZerobusRuntime.write``
  builds a new sink per call) and on every schema change. An existing table is checked *before* any
  DDL, so a table whose properties drifted is neither evolved nor written; a table this call creates
  is checked after its CREATE (which declared the properties: creation, not repair);
- on a timer for long-lived sinks: ``conform`` (every batch) compares a monotonic clock against the next
  due time and re-reads the table at most once per ``recheck_interval_s``;
- an unmet condition raises ``PreconditionsUnmetError`` naming the table, each condition and the fix,
  logged at ERROR. Reconcile never sets a drifted primary-raw property back (``DesiredTable.repair``
  is the operator's explicit path).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import pyarrow as pa

from zerobus_orchestration.catalog.base import (
    PROP_SOURCE,
    DesiredTable,
    ReconcileOutcome,
    TableCatalog,
    TableState,
    TableTags,
)
from zerobus_orchestration.catalog.guard import conform_batch, refuse_unsendable
from zerobus_orchestration.catalog.plan import column_mapping_after, plan
from zerobus_orchestration.catalog.preconditions import primary_raw_conditions, require_conditions
from zerobus_orchestration.catalog.projection import projected
from zerobus_orchestration.catalog.steps import ReconcilePlan
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import ContractDescriptions
from zerobus_orchestration.errors import PreconditionsUnmetError, WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import RESERVED_NAMES
from zerobus_orchestration.wire_schema import arrow_column_problems

DEFAULT_RECHECK_INTERVAL_S = 60.0
_STAMPED = frozenset(RESERVED_NAMES)

log = logging.getLogger(__name__)


class _QuietReconciles:
    """Per process: reconciles that found nothing to do, by (catalog type, table).

    A reconcile re-reads the table, plans ``desired`` against it and, with an empty plan, returns what
    it read: nothing else goes in. So when ``ensure``'s own re-read equals the state such a reconcile
    saw and ``desired`` is the same, it would find nothing to do again and return the same state: the
    two re-reads it costs (a Delta log open each on ``local``) are skipped. Any change to the table
    (version, columns, properties, registration, sinks) makes the state differ, and then the catalog
    reconciles as always. Only with a re-read of ``ensure``'s own, i.e. for primary-raw tables.
    """

    _SIZE = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[type, str], tuple[TableState, DesiredTable, ReconcileOutcome]] = {}

    def get(
        self, catalog: TableCatalog, table: str, live: TableState | None, desired: DesiredTable
    ) -> ReconcileOutcome | None:
        if live is None:
            return None
        with self._lock:
            seen = self._seen.get((type(catalog), table))
        if seen is None or seen[0] != live or seen[1] != desired:
            return None
        return seen[2]

    def remember(
        self,
        catalog: TableCatalog,
        table: str,
        live: TableState | None,
        desired: DesiredTable,
        outcome: ReconcileOutcome,
    ) -> None:
        key = (type(catalog), table)
        quiet = not outcome.applied and outcome.plan.empty and outcome.state == live
        with self._lock:
            if not quiet or live is None:
                self._seen.pop(key, None)
                return
            if len(self._seen) >= self._SIZE:
                self._seen.clear()
            self._seen[key] = (live, desired, outcome)


_quiet = _QuietReconciles()


class CatalogGate:
    """Create/evolve on ``ensure``, guard every batch on ``conform``."""

    def __init__(
        self,
        catalog: TableCatalog,
        role: Role = Role.PRIMARY_RAW,
        descriptions: Mapping[str, str] | ContractDescriptions | None = None,
        properties: Mapping[str, str] | None = None,
        allow_widening: bool = False,
        comment_policy: CommentPolicy = CommentPolicy.RESPECT,
        *,
        tags: TableTags | None = None,
        check_preconditions: bool = True,
        metrics: SinkMetrics | None = None,
        source: str | None = None,
        recheck_interval_s: float = DEFAULT_RECHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``source``: stamped as ``twg.source`` on a table this gate creates (creation only; an explicit
        ``tags.source`` is a managed property instead). ``recheck_interval_s``: how often ``conform``
        re-reads a primary-raw table's preconditions for a long-lived sink (0: every batch)."""
        if recheck_interval_s < 0:
            raise ValueError(f"recheck_interval_s must be >= 0, got {recheck_interval_s}")
        self.catalog = catalog
        self.role = role
        if isinstance(descriptions, ContractDescriptions):
            contract = descriptions
            self.descriptions: Mapping[str, str] = dict(contract.descriptions)
            if tags is None:
                tags = TableTags(
                    owner=contract.owner,
                    contract_uri=contract.contract_uri,
                    contract_version=contract.contract_version,
                )
        else:
            self.descriptions = dict(descriptions or {})
        self.tags = tags
        self.properties = dict(properties or {})
        self.allow_widening = allow_widening
        self.comment_policy = comment_policy
        self.check_preconditions = check_preconditions
        self.metrics = metrics
        self.source = source
        self.recheck_interval_s = recheck_interval_s
        self._clock = clock
        self._recheck_lock = threading.Lock()
        self._recheck_due: dict[str, float] = {}  # table -> monotonic time of the next re-check
        self.last_outcome: ReconcileOutcome | None = None

    def desired(self, table: str, schema: pa.Schema) -> DesiredTable:
        present = set(schema.names)
        return DesiredTable.build(
            table,
            schema,
            self.role,
            descriptions={k: v for k, v in self.descriptions.items() if k in present},
            tags=self.tags,
            properties=self.properties,
            allow_widening=self.allow_widening,
            comment_policy=self.comment_policy,
            subset=True,
            create_properties=self._create_properties(),
        )

    def _create_properties(self) -> dict[str, str]:
        if self.source is None or (self.tags is not None and self.tags.source is not None):
            return {}
        return {PROP_SOURCE: self.source}

    @property
    def rechecks(self) -> bool:
        return self.check_preconditions and self.role is Role.PRIMARY_RAW

    def ensure(self, table: str, schema: pa.Schema, first: pa.RecordBatch | None = None) -> pa.Schema:
        """Create or evolve ``table`` for ``schema``; the declared target schema (``SchemaGate``).

        ``first``: the batch this is for. A batch whose values the table it would create cannot hold
        is refused before the CREATE, so a failed first write leaves no empty table behind.
        """
        live = self.catalog.describe(table) if self.rechecks else None
        if live is not None and live.registered:
            # The write-path re-check: a registered table whose properties drifted is refused before
            # any DDL and before any batch of this write is sent.
            self._require(table, live)
        desired = self.desired(table, schema)
        # Before any DDL: a column the wire cannot carry would leave a table no batch can be sent to.
        self._refuse_unsendable(table, schema, live or self.catalog.describe, desired)
        outcome = _quiet.get(self.catalog, table, live, desired)
        if outcome is None:
            if first is not None:
                self._refuse_before_create(table, first, desired, live)
            outcome = self.catalog.reconcile(table, desired)
            _quiet.remember(self.catalog, table, live, desired, outcome)
        self.last_outcome = outcome
        for note in outcome.notes:
            log.warning("%s", note)
        if outcome.applied:
            log.info("reconciled %s: %s", table, "; ".join(s.describe() for s in outcome.plan.steps))
        if self.rechecks and (live is None or not live.registered):
            # Created now (with the properties), created by a racing producer between our describe
            # and our reconcile, or a table made outside the catalog that reconcile just registered
            # (without touching its properties): the state reconcile read back vouches for it.
            self._require(table, outcome.state)
        self._schedule_recheck(table)
        return outcome.state.arrow_schema()

    def _refuse_before_create(
        self, table: str, first: pa.RecordBatch, desired: DesiredTable, live: TableState | None
    ) -> None:
        """Raise ``conform``'s ``WriteBoundaryError`` before any DDL when ``table`` does not exist and
        ``first`` does not fit the table ``desired`` creates. The target is planned, not read (``plan``
        against no table is pure), so the catalog is asked only when the batch does not fit: an existing
        table judges it by its own declared types, after the reconcile, as every batch is."""
        target = projected(None, plan(None, desired, allow_widening=desired.allow_widening)).arrow_schema()
        try:
            conform_batch(table, first, target, trusted=_STAMPED)  # uncounted: conform counts this batch
        except WriteBoundaryError:
            if live is None and self.catalog.locate(table) is None:
                raise
            # The table exists: nothing would be created, and conform judges the batch against it.

    def projected(self, table: str, schema: pa.Schema, after: TableState | None = None) -> TableState:
        """The table as ``ensure(table, schema)`` would leave it, planned and not applied: nothing is
        created or changed. Its ``arrow_schema()`` is the target ``ensure`` would return.

        ``after``: what an earlier projection of the same write left (a later batch schema is planned
        against it, as its ``ensure`` would run against the first one's table); None reads the catalog.
        Raises where ``ensure`` would: ``PlanRefusedError``, ``PreconditionsUnmetError``.
        """
        desired = self.desired(table, schema)
        if after is not None:
            the_plan = plan(after, desired, allow_widening=desired.allow_widening)
            self._refuse_unsendable(table, schema, after, desired, the_plan)
            the_plan.raise_if_refused()
            return projected(after, the_plan)
        live = self.catalog.describe(table)
        if self.rechecks and live is not None and live.registered:
            self._require(table, live)
        the_plan = self.catalog.plan_against(live, desired)  # the state just checked, not a second read
        self._refuse_unsendable(table, schema, live, desired, the_plan)
        the_plan.raise_if_refused()
        return projected(live, the_plan)

    def _refuse_unsendable(
        self,
        table: str,
        schema: pa.Schema,
        live: TableState | Callable[[str], TableState | None] | None,
        desired: DesiredTable,
        the_plan: ReconcilePlan | None = None,
    ) -> None:
        """Refuse a column the wire cannot carry (``guard.refuse_unsendable``), naming it and the fix.

        A name outside ``[A-Za-z_][A-Za-z0-9_]*`` is fine on a table with column mapping only, so for one
        the table's mode once reconciled is worked out: from the plan (a CREATE's properties, a property
        step), else the live table. Emulated column mapping does not count: the table the service reads
        is plain. ``live`` may be the catalog's ``describe``, called only then.
        """
        refuse_unsendable(table, schema, column_mapping=True, metrics=self.metrics)
        if not any(p.is_name for p in arrow_column_problems(schema, column_mapping=False)):
            return
        state = live(table) if callable(live) else live
        mapped = column_mapping_after(state, the_plan or self.catalog.plan(table, desired))
        refuse_unsendable(table, schema, column_mapping=mapped, metrics=self.metrics)

    def conform(self, table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
        if self.rechecks and self._recheck_due_now(table):
            self.recheck(table)
        # The sink's batches: the reserved columns are the engine's own stamp (input holding a reserved
        # name is refused before stamping), so they skip the per-value range scan.
        return conform_batch(table, batch, target, metrics=self.metrics, trusted=_STAMPED)

    def recheck(self, table: str) -> None:
        """Re-read ``table`` now and raise ``PreconditionsUnmetError`` if a primary-raw condition is unmet.

        A refusal leaves the re-check due, so every later batch is refused too until the table is fixed.
        """
        self._require(table, self.catalog.describe(table))
        self._schedule_recheck(table)

    def _require(self, table: str, state: TableState | None) -> None:
        try:
            require_conditions(table, primary_raw_conditions(state, table))
        except PreconditionsUnmetError as exc:
            with self._recheck_lock:
                self._recheck_due[table] = float("-inf")  # refuse the next batch too, after a re-read
            log.error("%s", exc)
            raise

    def _schedule_recheck(self, table: str) -> None:
        with self._recheck_lock:
            self._recheck_due[table] = self._clock() + self.recheck_interval_s

    def _recheck_due_now(self, table: str) -> bool:
        # The push path: one clock read and a dict look-up; the catalog is read only when due.
        now = self._clock()
        with self._recheck_lock:
            due = self._recheck_due.get(table)
            if due is not None and now < due:
                return False
            # Claimed: sinks sharing this gate re-read the table once per interval, not once each.
            self._recheck_due[table] = now + self.recheck_interval_s
            return due is not None  # ``conform`` without ``ensure`` first: the timer starts now
