"""The "Databricks table" button on an ingest task: the table's Catalog Explorer page.

Airflow 3 resolves the link in the worker when the try ends (``finalize``) and stores it as an XCom
the UI reads, so ``get_link`` runs in the process that executed the task and reads what ``execute``
found out from the connection. Embedded there is no workspace: the link is empty and the button is
disabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class ZerobusTableLink(BaseOperatorLink):
    """Catalog Explorer URL of the operator's table (``<workspace_url>/explore/data/<c>/<s>/<t>``)."""

    name = "Databricks table"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return str(getattr(operator, "table_url", None) or "")
