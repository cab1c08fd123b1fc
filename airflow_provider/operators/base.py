"""What every Zerobus operator shares: the connection knobs, a lazy hook, cleanup and coverage keys."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.utils.observability import log_sink_report


def coverage_keys(dag_id: str, task_id: str, run_id: str, map_index: int | None) -> tuple[str, str]:
    """``(source, partition)`` of one task instance's writes; a retried try maps to the same keys."""
    return f"{dag_id}/{task_id}", f"{run_id}/{-1 if map_index is None else map_index}"


def coverage_keys_from_context(context: Context | Mapping[str, Any], task: BaseOperator) -> tuple[str, str]:
    ti = context.get("ti")
    map_index = getattr(ti, "map_index", None)
    run_id = context.get("run_id") or getattr(ti, "run_id", None)
    if not run_id:
        raise ValueError(f"task {task.task_id}: the context has no run_id; run it inside a DAG run")
    return coverage_keys(task.dag_id, task.task_id, str(run_id), map_index)


def run_began(context: Context | Mapping[str, Any]) -> datetime.datetime | None:
    """The DAG run's ``run_after``, "the date before which the run won't start": no try of any of its
    tasks began earlier, and clearing the run keeps it. A resume bounded by it reads only the table's
    files of rows stamped since (``ZerobusRuntime.write``'s ``not_before``); None when the context
    has no DAG run (every file is read then)."""
    value = getattr(context.get("dag_run"), "run_after", None)
    return value if isinstance(value, datetime.datetime) else None


def drain_report_release(
    hook: ZerobusHook,
    logger: Any,
    result: Mapping[str, Any] | None = None,
    *,
    tables: Sequence[str] = (),
    task: str = "",
) -> dict[str, Any] | None:
    """The end of every task: drain, log what the sink did, release. Never masks the task's outcome."""
    if not hook.runtime_acquired:
        return None
    summary = None
    try:
        try:
            hook.drain()
        finally:
            summary = log_sink_report(logger, hook.health(), result, tables=tables, task=task)
    except Exception:
        logging.getLogger(__name__).warning(
            "could not drain or read the zerobus health snapshot", exc_info=True
        )
    finally:
        try:
            hook.release()  # drains once more: what failed there was logged above, not raised over the task's
        except Exception:
            logging.getLogger(__name__).warning("releasing the zerobus runtime failed", exc_info=True)
    return summary


# Arguments the operator itself passes to the hook: given again in ``hook_params`` they would conflict.
_OPERATOR_HOOK_ARGS = ("zerobus_conn_id", "config_overrides")


def build_hook(
    task_id: str, zerobus_conn_id: str, config_overrides: Mapping[str, Any], hook_params: Mapping[str, Any]
) -> ZerobusHook:
    """``ZerobusHook(**hook_params)`` plus the operator's own connection and overrides, or a clear error."""
    clash = sorted(set(hook_params) & set(_OPERATOR_HOOK_ARGS))
    if clash:
        raise AirflowFailException(
            f"{task_id}: hook_params sets {', '.join(clash)}, which the operator passes to the hook itself; "
            f"give {' / '.join(f'{name}=' for name in clash)} to the operator instead"
        )
    try:
        return ZerobusHook(
            zerobus_conn_id=zerobus_conn_id, config_overrides=dict(config_overrides), **hook_params
        )
    except TypeError as exc:
        raise AirflowFailException(
            f"{task_id}: hook_params {sorted(hook_params)} are not ZerobusHook arguments ({exc}); "
            "remove them, or put zerobus settings in config_overrides"
        ) from None


class ZerobusBaseOperator(BaseOperator):
    """Holds ``zerobus_conn_id`` / ``config_overrides`` / ``hook_params``; no I/O until ``execute``.

    :param zerobus_conn_id: the ``zerobus`` connection (default ``zerobus_default``).
    :param config_overrides: nested ``ZerobusConfig`` settings applied over the connection's.
    :param hook_params: extra keyword arguments for the ``ZerobusHook`` constructor, like common-sql
        operators' ``hook_params`` (templated).
    """

    def __init__(
        self,
        *,
        zerobus_conn_id: str = ZerobusHook.default_conn_name,
        config_overrides: Mapping[str, Any] | None = None,
        hook_params: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zerobus_conn_id = zerobus_conn_id
        self.config_overrides = dict(config_overrides or {})
        self.hook_params = dict(hook_params or {})

    @cached_property
    def hook(self) -> ZerobusHook:
        return build_hook(self.task_id, self.zerobus_conn_id, self.config_overrides, self.hook_params)

    def report_and_release(
        self, result: Mapping[str, Any] | None = None, tables: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """Drain to durable, log health + metric summary (if the runtime came up), release it.

        ``tables`` narrows the metric summary to this task's pools; the health line shows them all.
        """
        if "hook" not in self.__dict__:  # never built (e.g. refused hook_params): nothing was acquired
            return None
        return drain_report_release(self.hook, self.log, result, tables=tables, task=self.task_id)

    def on_kill(self) -> None:
        """The task is being killed: drain and close this process's runtimes so nothing is left half-sent."""
        self.hook.close_all()
