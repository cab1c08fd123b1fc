"""The Parquet codec of a table's data files: Zstandard with Iceberg reads on, as on Databricks.

Databricks writes the data files of a UniForm (Iceberg-enabled) table with Zstandard instead of
Snappy ("UniForm uses Zstandard instead of Snappy as the compression codec for underlying Parquet data
files", https://docs.databricks.com/aws/en/delta/uniform); other Delta tables get Snappy, Delta's and
delta-rs's default. The emulator does the same, so read-back through Iceberg reads Zstandard files
locally as it will in production. A table has Iceberg reads on when its Delta configuration lists
``iceberg`` in ``delta.universalFormat.enabledFormats`` (the key the catalogs set, see
``emulator/unity/state.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

UNIFORM_FORMATS = "delta.universalFormat.enabledFormats"
ZSTD = "zstd"
SNAPPY = "snappy"


def iceberg_reads_on(configuration: Mapping[str, str | None]) -> bool:
    formats = configuration.get(UNIFORM_FORMATS) or ""
    return "iceberg" in {f.strip().lower() for f in formats.split(",")}


def parquet_codec(configuration: Mapping[str, str | None]) -> str:
    """``zstd`` for a table with Iceberg reads on, ``snappy`` otherwise."""
    return ZSTD if iceberg_reads_on(configuration) else SNAPPY
