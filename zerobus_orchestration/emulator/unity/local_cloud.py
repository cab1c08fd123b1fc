"""The emulator's workspace: Unity Catalog over the warehouse's real Delta tables, and its credentials.

``local_workspace`` builds the ``UnityWorkspace`` the emulator's HTTP side serves at its workspace URL:
one SQL warehouse (``LOCAL_SQL_WAREHOUSE_ID``; any other id is refused, as Databricks refuses an unknown
warehouse), the ``main`` catalog by default (others once created, ``CREATE CATALOG``), the metastore backed by
``DeltaBacking`` and saved beside the emulator's write-ahead log.

Temporary table credentials (``LocalIssuer``): READ for managed tables (READ_WRITE only for external
ones, as Unity Catalog). For an object-store warehouse they come from the emulator's credential source
(per-table STS keys) when it has one, else they are the warehouse's own keys; for a folder warehouse no
key is needed, and the issued ones open nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC
from pathlib import Path
from typing import Final, Protocol

from zerobus_orchestration.emulator.unity.delta_backing import ConvertedVersion, DeltaBacking
from zerobus_orchestration.emulator.unity.metastore import DEFAULT_CATALOG
from zerobus_orchestration.emulator.unity.state import FakeTable, now_ms
from zerobus_orchestration.emulator.unity.workspace import IssuedCredentials, SyntheticIssuer, UnityWorkspace
from zerobus_orchestration.storage import Access, VendedCredentials, reveal

LOCAL_SQL_WAREHOUSE_ID: Final = "zerobus-local-warehouse"
LOCAL_WORKSPACE_ID: Final = "1000000000000001"
STATE_FILE_NAME: Final = "unity_catalog.json"
OWN_KEYS_TTL_S: Final = 3600


class CredentialSource(Protocol):
    """Short-lived credentials per (table, access), as the Iceberg REST facade's source."""

    def get(self, table: str, access: Access) -> VendedCredentials: ...


class LocalIssuer:
    """Vends a table's READ keys: per-table from ``source``, else the warehouse's own, else synthetic."""

    def __init__(self, storage_options: Mapping[str, str] | None, source: CredentialSource | None) -> None:
        self._options = dict(storage_options or {})
        self._source = source

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials:
        if self._source is not None and table.location is None:
            access = Access.WRITE if operation == "READ_WRITE" else Access.READ
            vended = self._source.get(table.full_name, access)
            keys = reveal(vended.storage_options)
            return IssuedCredentials(
                access_key_id=keys.get("AWS_ACCESS_KEY_ID", ""),
                secret_access_key=keys.get("AWS_SECRET_ACCESS_KEY", ""),
                session_token=keys.get("AWS_SESSION_TOKEN", ""),
                expiration_ms=int(vended.expires_at.astimezone(UTC).timestamp() * 1000),
            )
        key_id = _option(self._options, "AWS_ACCESS_KEY_ID")
        if key_id:
            return IssuedCredentials(
                access_key_id=key_id,
                secret_access_key=_option(self._options, "AWS_SECRET_ACCESS_KEY"),
                session_token=_option(self._options, "AWS_SESSION_TOKEN"),
                expiration_ms=now_ms() + OWN_KEYS_TTL_S * 1000,
            )
        return SyntheticIssuer(OWN_KEYS_TTL_S).issue(table, operation)


def _option(options: Mapping[str, str], key: str) -> str:
    """An object-store option by its upper- or lower-case spelling (both are accepted by delta-rs)."""
    return options.get(key) or options.get(key.lower()) or ""


def local_workspace(
    warehouse: str,
    state_file: Path,
    *,
    storage_options: Mapping[str, str] | None = None,
    converted_version: ConvertedVersion | None = None,
    credentials: CredentialSource | None = None,
    catalogs: Iterable[str] = (DEFAULT_CATALOG,),
) -> UnityWorkspace:
    """The emulator's workspace over ``warehouse``, its records loaded from ``state_file``.

    ``catalogs`` exist from the start (``catalog.local_catalogs``, as for the ``local`` backend); others
    once created (``CREATE CATALOG``) or once they hold a table.
    """
    workspace = UnityWorkspace(
        warehouse_id=LOCAL_SQL_WAREHOUSE_ID,
        workspace_id=LOCAL_WORKSPACE_ID,
        storage_root=warehouse,
        credential_issuer=LocalIssuer(storage_options, credentials),
    )
    backing = DeltaBacking(
        warehouse,
        state_file,
        storage_options=dict(storage_options) if storage_options else None,
        converted_version=converted_version,
    )
    metastore = workspace.metastore
    metastore.catalogs = {c.lower() for c in catalogs}
    metastore.backing = backing
    backing.load(metastore)
    return workspace
