"""Three-part table names and where an embedded table lives in the warehouse.

Layout shared by the emulator, the local catalog, coverage and the Iceberg mirror:

    <warehouse>/<catalog>/<schema>/<table>/_delta_log   the Delta table
    <warehouse>/_zerobus/catalog.sqlite                 local catalog registry
    <warehouse>/_zerobus/iceberg.sqlite                 Iceberg mirror (pyiceberg SqlCatalog)
    <warehouse>/_zerobus/coverage.sqlite                coverage ranges
    <warehouse>/_zerobus/wal/<catalog.schema.table>/    emulator write-ahead log

Path segments are percent-encoded so hostile identifiers (slashes, newlines, quotes) stay one segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from zerobus_orchestration.errors import ConfigError

ZEROBUS_DIR = "_zerobus"


@dataclass(frozen=True)
class TableName:
    catalog: str
    schema: str
    table: str

    @classmethod
    def parse(cls, full_name: str) -> TableName:
        """Split ``catalog.schema.table``; backtick-quoted parts may contain dots."""
        parts = _split_three_part(full_name)
        if len(parts) != 3 or any(not p for p in parts):
            raise ConfigError(
                f"table name {full_name!r} must have three non-empty parts: catalog.schema.table "
                "(quote a part containing dots with backticks)"
            )
        return cls(*parts)

    @property
    def full_name(self) -> str:
        """Dotted name as Zerobus and Unity Catalog spell it (unquoted)."""
        return f"{self.catalog}.{self.schema}.{self.table}"

    def __str__(self) -> str:
        return self.full_name


def _split_three_part(name: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and i + 1 < len(name) and name[i + 1] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _segment(part: str) -> str:
    return quote(part, safe="")


def join_uri(base: str, *segments: str) -> str:
    return "/".join([base.rstrip("/"), *segments])


def table_uri(warehouse: str, name: TableName | str) -> str:
    """Where the Delta table for ``name`` lives under ``warehouse`` (a folder or an s3:// URI)."""
    tn = TableName.parse(name) if isinstance(name, str) else name
    return join_uri(warehouse, _segment(tn.catalog), _segment(tn.schema), _segment(tn.table))


def zerobus_dir(warehouse: str) -> str:
    return join_uri(warehouse, ZEROBUS_DIR)
