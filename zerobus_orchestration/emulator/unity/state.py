"""Unity Catalog tables as the local cloud models them, with the Delta protocol rules Databricks applies.

A ``FakeTable`` is the metastore's record of one table (declared properties, table features, comments).
Standing alone (``zerobus_orchestration.testing.FakeUnityCatalog``) it is the whole table; in the
emulator a ``TableBacking`` (``delta_backing``) keeps it in step with the real Delta table.

Rules emulated (what a primary-raw reconcile runs into on a real workspace):
- table features are sticky: disabling a property does not remove its feature;
- the protocol follows the features: any writer feature -> writer 7; ``columnMapping`` -> reader 2;
  ``deletionVectors`` / ``timestampNtz`` / ``typeWidening`` -> reader 3;
- ``delta.enableIcebergCompatV2=true`` needs column mapping: enabled automatically at CREATE, refused on
  an existing table without it (``DELTA_ICEBERG_COMPAT_VIOLATION.WRONG_REQUIRED_TABLE_PROPERTY``);
- IcebergCompatV2 forbids deletion vectors (``...DELETION_VECTORS_SHOULD_BE_DISABLED``);
- ``delta.universalFormat.enabledFormats=iceberg`` needs IcebergCompatV2
  (``DELTA_UNIVERSAL_FORMAT_VIOLATION``);
- ``ALTER COLUMN TYPE`` needs ``delta.enableTypeWidening``; with IcebergCompatV2 only Iceberg-legal
  promotions (int -> long, float -> double, decimal precision up, same scale) pass;
- without column mapping (``delta.columnMapping.mode`` not ``name``/``id``), a column or nested field
  name containing a space, newline, tab or any of ``,;{}()=`` fails CREATE TABLE and ADD COLUMNS
  (``DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES``).
Every successful DDL commits one Delta version; UniForm conversion follows unless held.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from zerobus_orchestration.emulator.unity import types as uc_types

COLUMN_MAPPING = "delta.columnMapping.mode"
DELETION_VECTORS = "delta.enableDeletionVectors"
ICEBERG_COMPAT_V2 = "delta.enableIcebergCompatV2"
UNIFORM_FORMATS = "delta.universalFormat.enabledFormats"
TYPE_WIDENING = "delta.enableTypeWidening"
MIN_READER = "delta.minReaderVersion"
MIN_WRITER = "delta.minWriterVersion"
FEATURE_PREFIX = "delta.feature."

_READER_V3_FEATURES = frozenset(
    {"deletionVectors", "timestampNtz", "typeWidening", "v2Checkpoint", "variantType"}
)
_READER_FEATURES = _READER_V3_FEATURES | {"columnMapping"}
# Written independently of ``catalog.base.CHARS_NEEDING_COLUMN_MAPPING`` on purpose: the fake stands in
# for Databricks, so sharing the backend's constant would let one typo pass both sides.
_INVALID_WITHOUT_COLUMN_MAPPING = frozenset(" ,;{}()\n\t=")


class StatementFailure(Exception):
    """A statement the metastore refuses, shaped like a Databricks SQL error.

    Not a package error on purpose: it models the *service side*. The statement API answers it as a
    FAILED statement, which the client turns into ``StatementFailedError``; ``error_class`` is the
    Databricks error-class text.
    """

    def __init__(self, error_class: str, message: str, *, sqlstate: str = "42000", code: str = "BAD_REQUEST"):
        super().__init__(f"[{error_class}] {message} SQLSTATE: {sqlstate}")
        self.error_class = error_class
        self.service_code = code


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FakeColumn:
    name: str
    dtype: exp.DataType
    nullable: bool = True
    comment: str | None = None


@dataclass
class FakeTable:
    catalog: str
    schema: str
    name: str
    storage_root: str
    columns: list[FakeColumn] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    features: set[str] = field(default_factory=set)
    table_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created_at: int = field(default_factory=now_ms)
    updated_at: int = field(default_factory=now_ms)
    version: int = 0
    converted_delta_version: int | None = None
    converted_at: int | None = None
    comment: str | None = None
    history: list[tuple[int, int, str]] = field(default_factory=list)  # (version, timestamp ms, operation)
    # ``CREATE TABLE ... LOCATION '<uri>'`` makes an EXTERNAL table there; None: MANAGED, under the root.
    location: str | None = None
    # Where a MANAGED table lives when the metastore is backed by real storage (None: under the root).
    managed_location: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.catalog}.{self.schema}.{self.name}"

    @property
    def table_type(self) -> str:
        return "EXTERNAL" if self.location is not None else "MANAGED"

    @property
    def storage_location(self) -> str:
        if self.location is not None:
            return self.location
        if self.managed_location is not None:
            return self.managed_location
        return f"{self.storage_root.rstrip('/')}/tables/{self.table_id}"

    def column(self, name: str) -> FakeColumn | None:
        return next((c for c in self.columns if c.name.lower() == name.lower()), None)

    # -- protocol ---------------------------------------------------------------------------------

    @property
    def reader_features(self) -> set[str]:
        return {f for f in self.features if f in _READER_FEATURES}

    @property
    def min_reader_version(self) -> int:
        declared = int(self.properties.get(MIN_READER, "1"))
        if self.features & _READER_V3_FEATURES:
            return max(3, declared)
        if "columnMapping" in self.features:
            return max(2, declared)
        return declared

    @property
    def min_writer_version(self) -> int:
        declared = int(self.properties.get(MIN_WRITER, "2"))
        return max(7, declared) if self.features else declared

    @property
    def column_mapping_enabled(self) -> bool:
        return self.properties.get(COLUMN_MAPPING, "none").lower() in ("name", "id")

    @property
    def uniform_enabled(self) -> bool:
        formats = {f.strip().lower() for f in self.properties.get(UNIFORM_FORMATS, "").split(",")}
        return "iceberg" in formats and _true(self.properties.get(ICEBERG_COMPAT_V2))

    def user_properties(self) -> dict[str, str]:
        """Properties as ``DESCRIBE DETAIL`` shows them (no protocol keys)."""
        return {
            k: v
            for k, v in self.properties.items()
            if k not in (MIN_READER, MIN_WRITER) and not k.startswith(FEATURE_PREFIX)
        }

    def rest_properties(self) -> dict[str, str]:
        """Properties as the UC REST API shows them: user keys plus the protocol (``SHOW TBLPROPERTIES``)."""
        props = self.user_properties()
        props[MIN_READER] = str(self.min_reader_version)
        props[MIN_WRITER] = str(self.min_writer_version)
        for feature in sorted(self.features):
            props[FEATURE_PREFIX + feature] = "supported"
        return props

    # -- changes ----------------------------------------------------------------------------------

    def apply_properties(self, changes: dict[str, str], *, creating: bool) -> None:
        """Validate and apply ``SET TBLPROPERTIES`` (or the CREATE clause); raise before mutating."""
        merged = {**self.properties, **changes}
        features = set(self.features)
        if _true(merged.get(ICEBERG_COMPAT_V2)):
            if merged.get(COLUMN_MAPPING, "none").lower() not in ("name", "id"):
                if not creating:
                    raise StatementFailure(
                        "DELTA_ICEBERG_COMPAT_VIOLATION.WRONG_REQUIRED_TABLE_PROPERTY",
                        f"The validation of IcebergCompatV2 has failed. Table property "
                        f"'{COLUMN_MAPPING}' must be 'name' or 'id' on {self.full_name}.",
                    )
                merged[COLUMN_MAPPING] = "name"
            if _true(merged.get(DELETION_VECTORS)):
                raise StatementFailure(
                    "DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_SHOULD_BE_DISABLED",
                    f"The validation of IcebergCompatV2 has failed. Deletion vectors must be disabled on "
                    f"{self.full_name}: set '{DELETION_VECTORS}' = 'false'.",
                )
            features.add("icebergCompatV2")
        formats = {f.strip().lower() for f in merged.get(UNIFORM_FORMATS, "").split(",") if f.strip()}
        if "iceberg" in formats and not _true(merged.get(ICEBERG_COMPAT_V2)):
            raise StatementFailure(
                "DELTA_UNIVERSAL_FORMAT_VIOLATION",
                f"The validation of Universal Format (iceberg) has failed on {self.full_name}: "
                f"'{ICEBERG_COMPAT_V2}' must be 'true'.",
            )
        old_mode = self.properties.get(COLUMN_MAPPING, "none").lower()
        new_mode = merged.get(COLUMN_MAPPING, "none").lower()
        if old_mode in ("name", "id") and new_mode != old_mode:
            raise StatementFailure(
                "DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE",
                f"Changing column mapping mode from '{old_mode}' to '{new_mode}' is not supported.",
            )
        if new_mode in ("name", "id"):
            features.add("columnMapping")
        if _true(merged.get(DELETION_VECTORS)):
            features.add("deletionVectors")
        if _true(merged.get(TYPE_WIDENING)):
            features.add("typeWidening")
        for key, value in merged.items():
            if key.startswith(FEATURE_PREFIX) and value.lower() in ("supported", "enabled"):
                features.add(key[len(FEATURE_PREFIX) :])
        self.properties = merged
        self.features = features

    def check_column_names(self, columns: list[FakeColumn]) -> None:
        """Refuse names Parquet cannot carry as they are: only column mapping decouples them."""
        if self.column_mapping_enabled:
            return
        invalid = [
            ".".join(_quoted_part(p) for p in path)
            for column in columns
            for path in uc_types.field_paths(column.name, column.dtype)
            if _INVALID_WITHOUT_COLUMN_MAPPING.intersection(path[-1])
        ]
        if invalid:
            raise StatementFailure(
                "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES",
                "Found invalid character(s) among ' ,;{}()\\n\\t=' in the column names of your schema. "
                f"Invalid column names: {', '.join(invalid)}. Please use other characters and try again. "
                "Alternatively, enable Column Mapping to keep using these characters.",
                sqlstate="42K05",
            )

    def add_column(self, column: FakeColumn) -> None:
        self.check_column_names([column])
        if self.column(column.name) is not None:
            raise StatementFailure(
                "FIELD_ALREADY_EXISTS",
                f"Cannot add column, because `{column.name}` already exists in {self.full_name}.",
            )
        if not column.nullable:
            raise StatementFailure(
                "DELTA_NOT_NULL_COLUMN_NOT_FOUND_IN_STRUCT",
                f"Cannot add NOT NULL column `{column.name}` to existing table {self.full_name}; "
                "add it nullable.",
            )
        self.columns.append(column)
        self.note_column_types()

    def note_column_types(self) -> None:
        if any(uc_types.contains_ntz(c.dtype) for c in self.columns):
            self.features.add("timestampNtz")

    def require_column(self, name: str) -> FakeColumn:
        column = self.column(name)
        if column is None:
            raise StatementFailure(
                "UNRESOLVED_COLUMN.WITH_SUGGESTION",
                f"A column `{name}` cannot be resolved in {self.full_name}. Did you mean one of "
                f"{[c.name for c in self.columns]}?",
                sqlstate="42703",
            )
        return column

    def change_type(self, name: str, new: exp.DataType) -> None:
        column = self.require_column(name)
        old = column.dtype
        if uc_types.type_text(old) == uc_types.type_text(new):
            return
        if not _true(self.properties.get(TYPE_WIDENING)):
            raise StatementFailure(
                "NOT_SUPPORTED_CHANGE_COLUMN",
                f"ALTER TABLE ALTER COLUMN is not supported for changing column `{name}` of {self.full_name} "
                f"from {uc_types.sql_text(old)} to {uc_types.sql_text(new)}; enable '{TYPE_WIDENING}'.",
                sqlstate="0A000",
            )
        legal = (
            _iceberg_legal_widening(old, new)
            if "icebergCompatV2" in self.features
            else _delta_widening(old, new)
        )
        if not legal:
            error = (
                "DELTA_ICEBERG_COMPAT_VIOLATION.UNSUPPORTED_TYPE_WIDENING"
                if "icebergCompatV2" in self.features
                else "NOT_SUPPORTED_CHANGE_COLUMN"
            )
            raise StatementFailure(
                error,
                f"Type change of column `{name}` of {self.full_name} from {uc_types.sql_text(old)} to "
                f"{uc_types.sql_text(new)} is not supported.",
                sqlstate="0A000",
            )
        column.dtype = new

    def commit(self, operation: str) -> None:
        """One new Delta version (UniForm conversion is the metastore's call)."""
        self.version += 1
        self.updated_at = now_ms()
        self.history.append((self.version, self.updated_at, operation))

    def convert_uniform(self) -> None:
        if self.uniform_enabled:
            self.converted_delta_version = self.version
            self.converted_at = now_ms()

    def copy(self) -> FakeTable:
        """A scratch copy to validate a change on: a failed statement leaves the original untouched."""
        return FakeTable(
            self.catalog,
            self.schema,
            self.name,
            storage_root=self.storage_root,
            columns=[FakeColumn(c.name, c.dtype.copy(), c.nullable, c.comment) for c in self.columns],
            properties=dict(self.properties),
            features=set(self.features),
            table_id=self.table_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
            version=self.version,
            converted_delta_version=self.converted_delta_version,
            converted_at=self.converted_at,
            comment=self.comment,
            history=list(self.history),
            location=self.location,
            managed_location=self.managed_location,
        )

    def adopt(self, scratch: FakeTable) -> None:
        """Take the validated metadata of ``scratch`` (a ``copy`` a statement changed)."""
        self.columns = scratch.columns
        self.properties = scratch.properties
        self.features = scratch.features
        self.comment = scratch.comment

    # -- REST and SQL shapes ----------------------------------------------------------------------

    def table_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": self.name,
            "catalog_name": self.catalog,
            "schema_name": self.schema,
            "full_name": self.full_name,
            "table_type": self.table_type,
            "data_source_format": "DELTA",
            "table_id": self.table_id,
            "storage_location": self.storage_location,
            "owner": "fake-owner@example.com",
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "created_by": "fake-owner@example.com",
            "columns": [
                {
                    "name": c.name,
                    "type_text": uc_types.type_text(c.dtype),
                    "type_json": uc_types.type_json(c.name, c.dtype, c.nullable, c.comment),
                    "type_name": uc_types.type_name(c.dtype),
                    "position": i,
                    "nullable": c.nullable,
                    **({"comment": c.comment} if c.comment is not None else {}),
                    **_precision_scale(c.dtype),
                }
                for i, c in enumerate(self.columns)
            ],
            "properties": self.rest_properties(),
        }
        if self.comment is not None:
            info["comment"] = self.comment
        if self.uniform_enabled and self.converted_delta_version is not None:
            info["delta_uniform_iceberg"] = {
                "metadata_location": (
                    f"{self.storage_location}/metadata/v{self.converted_delta_version}.metadata.json"
                ),
                "converted_delta_version": self.converted_delta_version,
                "converted_delta_timestamp": self.converted_at,
            }
        return info

    def describe_detail_row(self) -> dict[str, Any]:
        return {
            "format": "delta",
            "id": self.table_id,
            "name": self.full_name,
            "description": self.comment,
            "location": self.storage_location,
            "createdAt": self.created_at,
            "lastModified": self.updated_at,
            "partitionColumns": [],
            "clusteringColumns": [],
            "numFiles": 0,
            "sizeInBytes": 0,
            "properties": self.user_properties(),
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
            "tableFeatures": sorted(self.features),
            "statistics": {},
        }


def _quoted_part(name: str) -> str:
    # Spark's multi-part name spelling: a part that would not read back as one identifier is backticked.
    simple = name.replace("_", "a").isalnum() and not name[:1].isdigit()
    return name if simple else "`" + name.replace("`", "``") + "`"


def _precision_scale(dtype: exp.DataType) -> dict[str, int]:
    if dtype.this != exp.DataType.Type.DECIMAL:
        return {}
    precision, scale = uc_types.decimal_params(dtype)
    return {"type_precision": precision, "type_scale": scale}


def _iceberg_legal_widening(old: exp.DataType, new: exp.DataType) -> bool:
    t = exp.DataType.Type
    ranks = uc_types.INTEGRAL_RANK  # byte/short/int are all Iceberg ``int``: any integral widening is legal
    if old.this in ranks and new.this in ranks:
        return ranks[new.this] > ranks[old.this]
    if old.this == t.FLOAT and new.this == t.DOUBLE:
        return True
    if old.this == new.this == t.DECIMAL:
        (p1, s1), (p2, s2) = uc_types.decimal_params(old), uc_types.decimal_params(new)
        return s1 == s2 and p2 > p1
    return False


def _delta_widening(old: exp.DataType, new: exp.DataType) -> bool:
    t = exp.DataType.Type
    ranks = uc_types.INTEGRAL_RANK
    if old.this in ranks and new.this in ranks:
        return ranks[new.this] > ranks[old.this]
    if old.this in ranks and new.this == t.DOUBLE:
        return True
    if old.this == t.FLOAT and new.this == t.DOUBLE:
        return True
    if old.this == t.DATE and new.this == t.TIMESTAMPNTZ:
        return True
    if old.this == new.this == t.DECIMAL:
        (p1, s1), (p2, s2) = uc_types.decimal_params(old), uc_types.decimal_params(new)
        return s2 >= s1 and (p2 - s2) >= (p1 - s1) and (p2, s2) != (p1, s1)
    return False
