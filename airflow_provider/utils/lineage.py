"""What an ingested table is called outside this package: Airflow asset URI, OpenLineage name, UI link.

Kept free of Airflow and OpenLineage imports: the names are plain values, so they are testable alone
and the optional OpenLineage provider is only imported where facets are built
(``airflow_provider.utils.openlineage``).

Names follow the Databricks provider, so assets and lineage written here join those of Databricks
operators and sensors:

- Asset URI ``databricks://<host>/<catalog>/<schema>/<table>`` (the Databricks provider owns and
  registers that scheme; this provider does not register it again).
- OpenLineage dataset: namespace ``databricks://<host>``, name ``<catalog>.<schema>.<table>``.
- ``<host>`` is the workspace URL's host (and port, when it has one). The embedded emulator has no
  workspace, so its tables use the host ``localhost``: ``databricks://localhost/main/raw/orders``.
- Link: Catalog Explorer, ``<workspace_url>/explore/data/<catalog>/<schema>/<table>``; none embedded
  (a ``file://`` link from the web UI would not open, and the folder is on the worker anyway).

Input files are named by the OpenLineage naming spec: a local file is namespace ``file`` with its
absolute path; an object-store file ``<scheme>://<bucket>`` with the key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from zerobus_orchestration.tables import TableName

if TYPE_CHECKING:
    import pyarrow as pa

    from zerobus_orchestration.config import ZerobusConfig

ASSET_SCHEME = "databricks"
EMBEDDED_HOST = "localhost"
"""The host of every embedded table's asset URI and OpenLineage namespace (there is no workspace)."""
ALIAS_PREFIX = "zerobus:"
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasbs"})


def workspace_host(workspace_url: str) -> str:
    """``https://dbc-1.cloud.databricks.com/`` -> ``dbc-1.cloud.databricks.com`` (port kept, no userinfo)."""
    text = workspace_url.strip()
    parts = urlsplit(text if "://" in text else f"https://{text}")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError(f"workspace URL {workspace_url!r} has no host; set it to https://<workspace>")
    return f"{host}:{parts.port}" if parts.port else host


@dataclass(frozen=True)
class TableIdentity:
    """One table as Airflow, OpenLineage and the UI name it."""

    host: str
    name: TableName
    workspace_url: str | None = None

    @property
    def asset_uri(self) -> str:
        n = self.name
        return f"{ASSET_SCHEME}://{self.host}/{n.catalog}/{n.schema}/{n.table}"

    @property
    def namespace(self) -> str:
        return f"{ASSET_SCHEME}://{self.host}"

    @property
    def dataset_name(self) -> str:
        return self.name.full_name

    @property
    def explorer_url(self) -> str | None:
        """Catalog Explorer page of the table; ``None`` without a workspace (embedded)."""
        if not self.workspace_url:
            return None
        n = self.name
        return f"{self.workspace_url.rstrip('/')}/explore/data/{n.catalog}/{n.schema}/{n.table}"


def table_identity(config: ZerobusConfig, table: str) -> TableIdentity:
    """The identity of ``table`` written through ``config`` (embedded: host ``localhost``, no link)."""
    name = TableName.parse(table)
    if config.embedded or not config.workspace_url:
        return TableIdentity(host=EMBEDDED_HOST, name=name)
    return TableIdentity(
        host=workspace_host(config.workspace_url), name=name, workspace_url=config.workspace_url
    )


def table_asset_uri(table: str, host: str = EMBEDDED_HOST) -> str:
    """The asset URI a downstream DAG schedules on: ``host`` is the workspace host, or the default
    ``localhost`` for the embedded emulator."""
    return TableIdentity(host=host, name=TableName.parse(table)).asset_uri


def alias_name(table: str) -> str:
    """The ``AssetAlias`` an ingest task declares at parse time: the workspace host is only known once
    the connection is read (in ``execute``), so the concrete asset is attached to the alias then."""
    return f"{ALIAS_PREFIX}{table}"


@dataclass(frozen=True)
class DatasetName:
    """An OpenLineage dataset's ``(namespace, name)``."""

    namespace: str
    name: str


def file_dataset(path: str) -> DatasetName:
    """A source file named by the OpenLineage naming spec."""
    if "://" not in path:
        return DatasetName("file", os.path.abspath(path))
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return DatasetName("file", parts.path)
    if scheme in _BUCKET_SCHEMES:
        return DatasetName(f"{scheme}://{parts.netloc}", parts.path.lstrip("/") or "/")
    return DatasetName(f"{scheme}://{parts.netloc}", parts.path or "/")


@dataclass(frozen=True)
class ColumnLineage:
    """A column of the written data: Databricks SQL type text and its description, if any."""

    name: str
    type: str
    description: str | None = None


def columns_of(schema: pa.Schema, descriptions: Mapping[str, str] | None = None) -> tuple[ColumnLineage, ...]:
    """Columns of the Arrow schema that was written, typed as the table stores them."""
    from zerobus_orchestration.reserved import is_reserved
    from zerobus_orchestration.type_map import delta_type

    described = descriptions or {}
    columns = []
    for f in schema:
        if is_reserved(f.name):
            continue
        try:
            type_text = delta_type(f.type)
        except Exception:  # an unsupported type fails the write itself; lineage only names it
            type_text = str(f.type)
        text = described.get(f.name)
        columns.append(ColumnLineage(f.name, type_text, text if text and text.strip() else None))
    return tuple(columns)


@dataclass
class WriteLineage:
    """What one ingest try read and wrote, filled in while it runs (the operator keeps it)."""

    output: TableIdentity | None = None
    inputs: list[DatasetName] = field(default_factory=list)
    schema: pa.Schema | None = None
    descriptions: Mapping[str, str] = field(default_factory=dict)
    rows_written: int | None = None
    bytes_written: int | None = None
    errors: list[str] = field(default_factory=list)


class SchemaTap:
    """Passes record batches through unchanged and remembers the first one's schema (for lineage)."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = iter(batches)
        self.schema: pa.Schema | None = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            if self.schema is None:
                self.schema = batch.schema
            yield batch


def asset_event_extra(identity: TableIdentity, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The asset event's ``extra``: which table, which run of which partition, and what it delivered
    (numbers and names only)."""
    extra: dict[str, Any] = {"table": identity.dataset_name}
    keys = (
        *("rows_written", "rows_skipped", "delta_version", "source", "partition", "partition_key"),
        *("logical_partition", "source_tag", "already_delivered", "delivered_by", "superseded_sources"),
    )
    for key in keys:
        if summary.get(key) is not None:
            extra[key] = summary[key]
    return extra
