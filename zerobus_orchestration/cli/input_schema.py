"""The schema a file input carries even when it holds no row, so an empty first write creates its table.

``files.iter_file_batches`` yields rows only: an input without a row gives the write no schema. This
reads the first file's own instead (the Parquet footer, the Arrow IPC header, the CSV header and first
block) with the declared types applied as ``files`` applies them, so the table an empty write creates
is the one its first row would have created.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.files import FileFormat, ResolvedFiles
from zerobus_orchestration.schema_text import arrow_schema_of_text


def input_schema(files: ResolvedFiles, declared: Mapping[str, object] | None = None) -> pa.Schema | None:
    """The first file's schema with ``declared`` columns' types; ``None`` when there is no file."""
    if not files.paths:
        return None
    path = files.paths[0]
    typed = None if declared is None else arrow_schema_of_text(declared)
    try:
        found = _read_schema(files.format, path, typed)
    except (FileNotFoundError, pa.ArrowInvalid) as exc:
        raise ConfigError(f"cannot read {files.format.value} input {path}: {exc}") from exc
    if typed is None:
        return found
    fields = list(found)
    for field in typed:
        index = found.get_field_index(field.name)
        if index < 0:
            raise ConfigError(
                f"{path}: the declared schema names column {field.name!r} the file does not have (it has "
                f"{found.names}); correct the schema or the file"
            )
        fields[index] = pa.field(field.name, field.type, field.nullable, found.field(index).metadata)
    return pa.schema(fields, found.metadata)


def _read_schema(fmt: FileFormat, path: str, typed: pa.Schema | None) -> pa.Schema:
    fs, inner = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    if fmt is FileFormat.PARQUET:
        with fs.open_input_file(inner) as fh:
            return pq.read_schema(fh)
    if fmt is FileFormat.ARROW:
        with fs.open_input_file(inner) as fh:
            try:
                return ipc.open_file(fh).schema
            except pa.ArrowInvalid:
                fh.seek(0)
                return ipc.open_stream(fh).schema
    convert = pacsv.ConvertOptions(column_types=typed) if typed is not None else None
    with fs.open_input_stream(inner, compression="detect") as fh:
        return pacsv.open_csv(fh, convert_options=convert).schema
