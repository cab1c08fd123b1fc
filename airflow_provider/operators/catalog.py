"""Table-level operators: reconcile a table to a schema, and check the primary-raw preconditions.

Both fail with ``AirflowFailException`` (no retries) when the problem is one a retry cannot fix: a
refused schema change or an unmet precondition needs a human or a DDL change, not another attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.base import ZerobusBaseOperator
from airflow_provider.utils.observability import redact
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError, NeedsOperatorError, PlanRefusedError
from zerobus_orchestration.schema_text import arrow_schema_of_text

if TYPE_CHECKING:
    import pyarrow as pa


def _role(task_id: str, role: str | None) -> Role | None:
    if not role:
        return None
    try:
        return Role(str(role))
    except ValueError:
        raise AirflowFailException(
            f"{task_id}: role {role!r} is not one of {[r.value for r in Role]}"
        ) from None


class ZerobusReconcileOperator(ZerobusBaseOperator):
    """Plan the change from the live table to ``schema``, then apply it (create, add, widen, comments).

    A plan holding any ``Refuse`` step (a dropped or narrowed column, a lossy type change) fails the task
    with every refusal listed, before anything is applied. XCom gets the applied steps and versions.

    :param table: target table (``catalog.schema.table``).
    :param schema: ``pyarrow.Schema`` or ``{column: "type"}``, SQL or Arrow names (see core ``schema_text``).
    :param descriptions: column comments ``{column: text}``.
    :param role: ``primary_raw`` or ``derived``; the connection's default when unset.
    :param plan_only: log and return the plan without applying it.
    """

    template_fields: Sequence[str] = (
        "table",
        "schema",
        "descriptions",
        "role",
        "zerobus_conn_id",
        "config_overrides",
        "hook_params",
    )
    template_fields_renderers = {"schema": "json", "descriptions": "json"}
    ui_color = "#fdf3e8"

    def __init__(
        self,
        *,
        table: str,
        schema: pa.Schema | Mapping[str, str],
        descriptions: Mapping[str, str] | None = None,
        role: str | None = None,
        plan_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.schema = schema
        self.descriptions = descriptions
        self.role = role
        self.plan_only = plan_only

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            schema = arrow_schema_of_text(self.schema, table=self.table)
            role = _role(self.task_id, self.role)
            plan = self.hook.plan(self.table, schema, role=role, descriptions=self.descriptions)
            self.log.info("reconcile plan for %s:\n%s", self.table, plan)
            refusals = plan.refusals
            if refusals:
                raise AirflowFailException(
                    f"{self.task_id}: reconcile of {self.table} refused ({len(refusals)} problem(s)); "
                    "nothing was applied:\n  " + "\n  ".join(r.describe() for r in refusals)
                )
            if self.plan_only:
                return redact({"table": self.table, "applied": False, **plan.to_dict()})  # type: ignore[no-any-return]
            outcome = self.hook.reconcile(self.table, schema, role=role, descriptions=self.descriptions)
            summary = {
                "table": self.table,
                "applied": outcome.applied,
                "version_before": outcome.version_before,
                "version_after": outcome.version_after,
                "steps": [step.describe() for step in outcome.plan.steps],
                "notes": [*outcome.plan.notes, *outcome.notes],
            }
            self.log.info(
                "%s: applied=%s, version %s -> %s",
                self.table,
                outcome.applied,
                outcome.version_before,
                outcome.version_after,
            )
            return redact(summary)  # type: ignore[no-any-return]
        except (PlanRefusedError, ConfigError, NeedsOperatorError) as exc:
            # Refused credentials or table included: a retry is refused the same way until someone acts.
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        finally:
            self.report_and_release(tables=[self.table])


class ZerobusPrimaryRawCheckOperator(ZerobusBaseOperator):
    """Fail unless ``table`` may be the primary raw table: registered, Iceberg reads (UniForm), column
    mapping, protocol versions, deletion vectors off. Re-read on every run; every unmet condition is
    listed in the failure. XCom gets ``{table, conditions: [{name, ok, detail}]}``.
    """

    template_fields: Sequence[str] = ("table", "zerobus_conn_id", "config_overrides", "hook_params")
    ui_color = "#fdf3e8"

    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            conditions = self.hook.preconditions(self.table)
            for condition in conditions:
                self.log.info("%s: %s", self.table, condition)
            unmet = [c for c in conditions if not c.ok]
            if unmet:
                raise AirflowFailException(
                    f"{self.task_id}: table {self.table} is not eligible as primary_raw; "
                    f"{len(unmet)} unmet precondition(s):\n  "
                    + "\n  ".join(f"{c.name}: {c.detail}" for c in unmet)
                )
            return redact(  # type: ignore[no-any-return]
                {
                    "table": self.table,
                    "conditions": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in conditions],
                }
            )
        finally:
            self.report_and_release(tables=[self.table])
