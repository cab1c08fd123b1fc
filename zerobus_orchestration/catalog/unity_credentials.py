"""Temporary table credentials from Unity Catalog (``temporary_table_credentials``) for ``unity``.

READ, and WRITE (``READ_WRITE``). WRITE on a MANAGED Delta table raises ``NotSupportedError`` without
asking: Unity Catalog vends write credentials only for EXTERNAL tables and managed Iceberg tables, and
Zerobus writes managed tables with OAuth.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import PermissionDenied
from databricks.sdk.service.catalog import TableOperation
from pydantic import SecretStr

from zerobus_orchestration.catalog.base import Access, VendedCredentials
from zerobus_orchestration.errors import CatalogError, NotSupportedError
from zerobus_orchestration.tables import TableName


def vend_table_credentials(
    client: WorkspaceClient, name: TableName, raw: Mapping[str, Any] | None, access: Access
) -> VendedCredentials:
    """Credentials for ``name`` (its REST ``TableInfo`` JSON is ``raw``; ``None``: the table is absent)."""
    if raw is None or not raw.get("table_id"):
        raise CatalogError(f"vend_credentials: table {name} does not exist in Unity Catalog")
    table_type = str(raw.get("table_type") or "")
    data_format = str(raw.get("data_source_format") or "DELTA")
    if access is Access.WRITE and table_type == "MANAGED" and data_format != "ICEBERG":
        # Unity Catalog answers PERMISSION_DENIED here; say why and what to do instead.
        raise NotSupportedError(
            f"write credentials for {name}: it is a MANAGED {data_format} table, and Unity Catalog "
            "vends write credentials only for EXTERNAL tables (and managed Iceberg tables); producers "
            "write managed tables through Zerobus with the OAuth service principal instead"
        )
    operation = TableOperation.READ_WRITE if access is Access.WRITE else TableOperation.READ
    try:
        response = client.temporary_table_credentials.generate_temporary_table_credentials(
            table_id=str(raw["table_id"]), operation=operation
        )
    except PermissionDenied as exc:
        raise CatalogError(
            f"vend_credentials: Unity Catalog refused {operation.value} credentials for {name} "
            f"({table_type or 'unknown'} table): {exc}. The caller needs EXTERNAL USE SCHEMA on the "
            "schema and the metastore needs external data access enabled"
        ) from exc
    if response.expiration_time is None:
        raise CatalogError(f"vend_credentials for {name}: the response carries no expiration_time")
    options: dict[str, SecretStr] = {}
    token: SecretStr | None = None
    aws = response.aws_temp_credentials
    if aws is not None:
        for key, value in (
            ("AWS_ACCESS_KEY_ID", aws.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", aws.secret_access_key),
            ("AWS_SESSION_TOKEN", aws.session_token),
        ):
            if value:
                options[key] = SecretStr(value)
    elif response.azure_user_delegation_sas is not None and response.azure_user_delegation_sas.sas_token:
        options["AZURE_STORAGE_SAS_TOKEN"] = SecretStr(response.azure_user_delegation_sas.sas_token)
    elif response.gcp_oauth_token is not None and response.gcp_oauth_token.oauth_token:
        token = SecretStr(response.gcp_oauth_token.oauth_token)
    else:
        raise NotSupportedError(f"vend_credentials for {name}: no credential kind this package can use")
    return VendedCredentials(
        table=name.full_name,
        access=access,
        url=response.url or str(raw.get("storage_location") or ""),
        expires_at=datetime.fromtimestamp(response.expiration_time / 1000, tz=UTC),
        storage_options=options,
        token=token,
    )
