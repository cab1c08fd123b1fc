"""The ingest operator's extra link is registered with Airflow and declared on the operator."""

from __future__ import annotations

from typing import Any

from airflow_provider.get_provider_info import get_provider_info
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.operators.links import ZerobusTableLink

LINK = "airflow_provider.operators.links.ZerobusTableLink"


def test_the_providers_manager_discovers_the_table_link() -> None:
    from airflow.providers_manager import ProvidersManager

    info: dict[str, Any] = get_provider_info()
    assert info["extra-links"] == [LINK]
    assert "asset-uris" not in info  # databricks:// belongs to the Databricks provider
    assert LINK in ProvidersManager().extra_links_class_names  # type: ignore[no-untyped-call]


def test_the_link_shows_what_execute_found_and_is_empty_before() -> None:
    op = ZerobusIngestOperator(task_id="ingest", table="main.raw.orders", path="/data/*.parquet")
    (link,) = op.operator_extra_links
    assert isinstance(link, ZerobusTableLink) and link.name == "Databricks table"
    assert link.get_link(op, ti_key=None) == ""  # type: ignore[arg-type]
    op.table_url = "https://dbc-1.cloud.databricks.com/explore/data/main/raw/orders"
    assert link.get_link(op, ti_key=None) == op.table_url  # type: ignore[arg-type]
