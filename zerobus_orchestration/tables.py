"""Three-part table names and where an embedded table lives in the warehouse.

A name is parsed once into a ``TableName`` and passed as parts from then on. ``TableName`` holds only
names Zerobus and Unity Catalog can both hold, folded the way Unity Catalog folds them:

* Zerobus writes only to tables whose names are ASCII letters, digits and underscores, so every part
  (catalog, schema, table) must match ``[A-Za-z0-9_]+``. That also rules out what Unity Catalog forbids
  (a period, a space, a slash, control characters) and makes a backtick never part of a name.
* Unity Catalog stores names in lower case: ``main.raw.Orders`` *is* ``main.raw.orders``. Parts are
  lower-cased on construction, so every key built from a name (coverage, the local registry, the
  emulator's tables and write-ahead logs) agrees with Unity Catalog.
* Unity Catalog names are at most 255 characters.
* The catalog name ``_zerobus`` is reserved: the embedded warehouse keeps its state folder there.

A part may be written in backticks (``main.raw.`orders` ``, SQL style); the backticks are not part of
the name. ``TableName.parse(x.full_name) == x`` holds for every name ``parse`` accepts.

Layout shared by the emulator, the local catalog, coverage and the Iceberg mirror:

    <warehouse>/<catalog>/<schema>/<table>/_delta_log   the Delta table
    <warehouse>/_zerobus/catalog.sqlite                 local catalog registry
    <warehouse>/_zerobus/iceberg.sqlite                 Iceberg mirror (pyiceberg SqlCatalog)
    <warehouse>/_zerobus/coverage.sqlite                coverage ranges
    <warehouse>/_zerobus/wal/<catalog.schema.table>/    emulator write-ahead log

``check_embedded_storage`` refuses, up front, a name whose folders there cannot exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from zerobus_orchestration.errors import TableNameError

ZEROBUS_DIR = "_zerobus"
MAX_NAME_CHARS = 255
"""Unity Catalog's limit on an object name."""
MAX_SEGMENT_BYTES = 255
"""A file or folder name's limit on common file systems (NAME_MAX) and object-store-backed mounts."""

_PART = re.compile(r"[A-Za-z0-9_]+")
_RULE = (
    "Zerobus writes only to tables whose catalog, schema and table names are ASCII letters, digits and "
    "underscores"
)
_FIX = "rename the table (letters, digits and underscores only)"


@dataclass(frozen=True)
class TableName:
    """``catalog.schema.table``, validated and lower-cased (see the module docstring)."""

    catalog: str
    schema: str
    table: str

    def __post_init__(self) -> None:
        shown = f"{self.catalog}.{self.schema}.{self.table}"
        for kind in ("catalog", "schema", "table"):
            part = getattr(self, kind)
            if not isinstance(part, str):
                raise TableNameError(f"table name {shown!r}: the {kind} part must be a string", part=kind)
            _check_part(shown, kind, part)
            object.__setattr__(self, kind, part.lower())
        if self.catalog == ZEROBUS_DIR:
            raise TableNameError(
                f"table name {shown!r}: the catalog name {ZEROBUS_DIR!r} is reserved (the embedded "
                f"warehouse keeps its state in <warehouse>/{ZEROBUS_DIR}). Fix: use another catalog",
                name=shown,
                part="catalog",
            )

    @classmethod
    def parse(cls, full_name: str) -> TableName:
        """``catalog.schema.table``; a part may be quoted in backticks (``` `` ``` is one backtick)."""
        if not isinstance(full_name, str):
            raise TableNameError(f"table name {full_name!r} must be a string: catalog.schema.table")
        parts = _split_three_part(full_name)
        if len(parts) != 3:
            raise TableNameError(
                f"table name {full_name!r} must have three non-empty parts: catalog.schema.table (found "
                f"{len(parts)}; a period separates the parts, so no part can contain one). Fix: write the "
                "full name, e.g. main.raw.events",
                name=full_name,
            )
        return cls(*parts)

    @property
    def full_name(self) -> str:
        """Dotted name as Zerobus and Unity Catalog spell it. No part needs quoting: see the class."""
        return f"{self.catalog}.{self.schema}.{self.table}"

    def __str__(self) -> str:
        return self.full_name


def _check_part(shown: str, kind: str, part: str) -> None:
    if not part:
        raise TableNameError(
            f"table name {shown!r}: the {kind} part is empty; a name must have three non-empty parts: "
            "catalog.schema.table",
            name=shown,
            part=kind,
        )
    if len(part) > MAX_NAME_CHARS:
        raise TableNameError(
            f"table name {shown[:80]!r}...: the {kind} part has {len(part)} characters; Unity Catalog names "
            f"are at most {MAX_NAME_CHARS} characters. Fix: use a shorter name",
            name=shown,
            part=kind,
        )
    if not _PART.fullmatch(part):
        bad = next(ch for ch in part if not _PART.fullmatch(ch))
        what = "a period (which separates catalog.schema.table)" if bad == "." else repr(bad)
        raise TableNameError(
            f"table name {shown!r}: the {kind} part {part!r} contains {what}; {_RULE}. Fix: {_FIX}",
            name=shown,
            part=kind,
        )


def _split_three_part(name: str) -> list[str]:
    """Split on periods outside backticks; inside backticks ``` `` ``` is a literal backtick."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and name.startswith("``", i):
                current.append("`")  # a literal backtick: refused by the part rule, shown in its message
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise TableNameError(f"table name {name!r} has an unterminated backtick. Fix: {_FIX}", name=name)
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


def wal_dir_name(full_name: str) -> str:
    """The emulator's write-ahead-log folder of a table: its whole ``catalog.schema.table``, quoted."""
    return quote(full_name, safe="")


def table_of_wal_dir(name: str) -> str:
    return unquote(name)


def check_embedded_storage(name: TableName | str) -> None:
    """Refuse a name whose embedded folders cannot exist (raise ``TableNameError`` naming the rule).

    The Delta table has a folder per part, and the emulator's write-ahead log one folder named after the
    whole ``catalog.schema.table``; each folder name must fit ``MAX_SEGMENT_BYTES``. Checked before the
    table is created or a stream opened, so the write fails at once instead of a stream that cannot open.
    """
    tn = TableName.parse(name) if isinstance(name, str) else name
    folders = {
        "catalog folder": _segment(tn.catalog),
        "schema folder": _segment(tn.schema),
        "table folder": _segment(tn.table),
        "write-ahead-log folder (named catalog.schema.table)": wal_dir_name(tn.full_name),
    }
    for what, segment in folders.items():
        size = len(segment.encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            raise TableNameError(
                f"table {tn.full_name[:60]}... ({len(tn.full_name)} characters): the embedded warehouse's "
                f"{what} would be {size} bytes, and a folder name is at most {MAX_SEGMENT_BYTES} bytes. "
                f"Fix: shorten the name so catalog.schema.table has at most {MAX_SEGMENT_BYTES} characters",
                name=tn.full_name,
            )


def zerobus_dir(warehouse: str) -> str:
    return join_uri(warehouse, ZEROBUS_DIR)
