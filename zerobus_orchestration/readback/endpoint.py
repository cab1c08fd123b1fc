"""Where read-back reads: an Iceberg REST catalog shaped like Unity Catalog's (warehouse = catalog name).

One code path for both modes: pyiceberg's ``RestCatalog`` against the emulator's read-only facade
locally, or against Unity Catalog's Iceberg REST endpoint in production (warehouse = catalog name,
identifier = ``<schema>.<table>``). ``force_sync`` asks the embedded facade to convert a table now.
Credentials: a static ``token``, or a ``header`` factory asked on every request (production: the
service principal's refreshing OAuth token, see ``readback.auth``). pyiceberg asks the catalog for
vended credentials (``X-Iceberg-Access-Delegation: vended-credentials``) by default, so the data files
are read with what Unity Catalog vends for the table.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from pydantic import SecretStr
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration.config import ReadbackConfig
from zerobus_orchestration.errors import ConfigError, ReadbackError
from zerobus_orchestration.readback.auth import rest_auth_properties
from zerobus_orchestration.readback.iceberg_nulls import keep_list_nulls
from zerobus_orchestration.readback.iceberg_views import read_views_as_plain
from zerobus_orchestration.reserved import OFFSET, SOURCE
from zerobus_orchestration.tables import TableName

SYNC_ROUTE: Final = "/zerobus/v1/sync/"  # the embedded facade's non-standard "convert now" endpoint

# Every read-back scan goes through an IcebergEndpoint: a NULL array of structs must read as NULL, and
# a file another Delta writer stored with view types must read (and filter) as string / binary.
keep_list_nulls()
read_views_as_plain()


@dataclass(frozen=True)
class IcebergEndpoint:
    """An Iceberg REST catalog shaped like Unity Catalog's (warehouse = catalog name).

    ``uri`` is the REST base, e.g. ``http://127.0.0.1:PORT/api/2.1/unity-catalog/iceberg-rest`` or
    ``https://<workspace>/api/2.1/unity-catalog/iceberg-rest``.
    """

    uri: str
    token: SecretStr | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    header: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: ReadbackConfig, *, default_uri: str | None = None) -> IcebergEndpoint:
        uri = config.iceberg_rest_uri or default_uri
        if not uri:
            raise ConfigError(
                "zerobus.readback.iceberg_rest_uri is not set: point it at the emulator's Iceberg REST "
                "facade or <workspace>/api/2.1/unity-catalog/iceberg-rest"
            )
        return cls(uri=uri.rstrip("/"), token=config.token)

    def catalog(self, warehouse: str) -> RestCatalog:
        """A pyiceberg RestCatalog for one Unity Catalog catalog."""
        properties: dict[str, Any] = {"uri": self.uri, "warehouse": warehouse, **self.properties}
        if self.header is not None:
            properties["auth"] = rest_auth_properties(self.header)
        elif self.token is not None:
            properties["token"] = self.token.get_secret_value()
        return RestCatalog(f"zerobus-{warehouse}", **properties)

    def load_table(self, table: str) -> IcebergTable:
        name = TableName.parse(table)
        loaded: IcebergTable = self.catalog(name.catalog).load_table((name.schema, name.table))
        return loaded

    def force_sync(self, table: str, timeout_s: float = 60.0) -> int:
        """Ask the embedded facade to convert ``table`` now; returns the Delta version it reflects."""
        name = TableName.parse(table)
        url = self.uri.rstrip("/") + SYNC_ROUTE + quote(name.full_name, safe="")
        request = urllib.request.Request(url, data=b"", method="POST")
        if self.header is not None:
            request.add_header("Authorization", self.header())
        elif self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token.get_secret_value()}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                payload: dict[str, Any] = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code in (404, 405) and "NoSuchTableException" not in detail:
                raise ReadbackError(
                    f"read-back of {table}: force=True needs the embedded emulator's Iceberg REST facade, "
                    f"and {self.uri} has no sync endpoint (HTTP {exc.code}); in production wait for the "
                    "UniForm conversion instead (force=False)",
                    table=table,
                ) from exc
            raise ReadbackError(
                f"read-back of {table}: forcing Iceberg metadata failed with HTTP {exc.code}: {detail}",
                table=table,
            ) from exc
        return int(payload["delta_version"])


def require_columns(table: IcebergTable, name: str, columns: Sequence[str]) -> None:
    """Refuse a table without the engine-owned columns read-back matches rows by."""
    present = {f.name for f in table.schema().fields}
    absent = [c for c in columns if c not in present]
    if absent:
        raise ReadbackError(
            f"read-back of {name}: column(s) {absent} are not in the Iceberg table; the table must be "
            f"written by the zerobus sink (reserved columns {SOURCE}, {OFFSET}) and partition_column must "
            "name an existing column",
            table=name,
        )
