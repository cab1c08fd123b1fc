"""``CatalogGate``: the sink's ``SchemaGate`` (``sink/gate.py``) over any ``TableCatalog``.

``ensure`` declares what the producer sends (a subset ``DesiredTable`` built from the stamped batch
schema plus reserved columns) and reconciles it: the table is created or evolved, refusals raise
``PlanRefusedError`` before anything is sent. For a ``primary_raw`` role the preconditions are then
re-checked (``PreconditionsUnmetError`` names every unmet one). It returns the live Arrow schema, the
declared target every batch is ``check``-ed against by the write-boundary guard.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pyarrow as pa

from zerobus_orchestration.catalog.base import DesiredTable, ReconcileOutcome, TableCatalog, TableTags
from zerobus_orchestration.catalog.guard import check_batch
from zerobus_orchestration.config import CommentPolicy, Role
from zerobus_orchestration.contracts import ContractDescriptions
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.preconditions import require_primary_raw

log = logging.getLogger(__name__)


class CatalogGate:
    """Create/evolve on ``ensure``, guard every batch on ``check``."""

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
    ) -> None:
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
        )

    def ensure(self, table: str, schema: pa.Schema) -> pa.Schema:
        outcome = self.catalog.reconcile(table, self.desired(table, schema))
        self.last_outcome = outcome
        for note in outcome.notes:
            log.warning("%s", note)
        if outcome.applied:
            log.info("reconciled %s: %s", table, "; ".join(s.describe() for s in outcome.plan.steps))
        if self.check_preconditions and self.role is Role.PRIMARY_RAW:
            require_primary_raw(self.catalog, table)
        return outcome.state.arrow_schema()

    def check(self, table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
        return check_batch(table, batch, target, metrics=self.metrics)
