"""Files and globs -> an ordered stream of Arrow record batches, with bounded memory (CLI ingest, Airflow).

Order matters: a retried try resumes by row position from coverage, so the same inputs must yield the
same rows in the same order. Globs are expanded and sorted; every file is read sequentially, batch by
batch (Parquet row groups via ``iter_batches``, Arrow IPC record batches, CSV blocks via the streaming
reader), so memory stays at about one batch whatever the file size.

A declared ``schema`` (``{column: "type"}`` or a ``pyarrow.Schema``; ``schema_text`` spells the types)
fixes the named columns' types instead of inferring them: CSV is parsed with those types (a timestamp
or decimal written as text, a column whose first rows are empty), Parquet and Arrow columns are cast.
Before the first batch is returned, every row of every file is read and converted once: a value that
does not fit fails the whole input, naming the file and the column, before anything is sent.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.schema_text import arrow_schema_of_text

_GLOB_CHARS = frozenset("*?[")


class FileFormat(StrEnum):
    PARQUET = "parquet"
    ARROW = "arrow"  # Arrow IPC, file or stream format
    CSV = "csv"


_SUFFIXES: dict[str, FileFormat] = {
    ".parquet": FileFormat.PARQUET,
    ".pq": FileFormat.PARQUET,
    ".arrow": FileFormat.ARROW,
    ".arrows": FileFormat.ARROW,
    ".ipc": FileFormat.ARROW,
    ".feather": FileFormat.ARROW,
    ".csv": FileFormat.CSV,
}
_ALIASES: dict[str, FileFormat] = {
    "ipc": FileFormat.ARROW,
    "feather": FileFormat.ARROW,
    "pq": FileFormat.PARQUET,
}


@dataclass(frozen=True)
class ResolvedFiles:
    paths: tuple[str, ...]
    format: FileFormat


def parse_format(name: str) -> FileFormat:
    key = name.strip().lower()
    try:
        return _ALIASES.get(key) or FileFormat(key)
    except ValueError:
        known = sorted({f.value for f in FileFormat} | set(_ALIASES))
        raise ConfigError(f"unknown file format {name!r}; use one of {known}") from None


def _infer_format(path: str) -> FileFormat | None:
    suffixes = PurePosixPath(path).suffixes
    if suffixes and suffixes[-1] in {".gz", ".bz2", ".zst", ".lz4"}:
        suffixes = suffixes[:-1]  # compressed CSV: pyarrow decompresses by extension
    return _SUFFIXES.get(suffixes[-1].lower()) if suffixes else None


def resolve_files(patterns: str | Sequence[str], file_format: str | None = None) -> ResolvedFiles:
    """Expand local globs (sorted), keep URIs as given, and pick one format for all files."""
    items = [patterns] if isinstance(patterns, str) else list(patterns)
    if not items:
        raise ConfigError("no input path given; set path to a file, a glob or a list of them")
    paths: list[str] = []
    for item in items:
        item = str(item)
        if "://" not in item and _GLOB_CHARS & set(item):
            matched = sorted(glob.glob(item, recursive=True))
            paths.extend(matched)
        else:
            paths.append(item)
    if file_format is not None:
        return ResolvedFiles(tuple(paths), parse_format(file_format))
    formats = {p: _infer_format(p) for p in paths}
    unknown = [p for p, f in formats.items() if f is None]
    if unknown:
        raise ConfigError(
            f"cannot tell the format of {unknown[:3]}; set file_format to parquet, arrow or csv"
        )
    distinct = {f for f in formats.values() if f is not None}
    if len(distinct) > 1:
        raise ConfigError(
            f"inputs mix formats {sorted(distinct)}; ingest each format in its own task or set file_format"
        )
    return ResolvedFiles(tuple(paths), distinct.pop() if distinct else FileFormat.PARQUET)


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    if "://" in path:
        fs, inner = pafs.FileSystem.from_uri(path)
        return fs, inner
    return pafs.LocalFileSystem(), path


def _parquet_batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    fs, inner = _filesystem(path)
    with fs.open_input_file(inner) as fh:
        yield from pq.ParquetFile(fh).iter_batches(batch_size=batch_rows)


def _arrow_batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    fs, inner = _filesystem(path)
    with fs.open_input_file(inner) as fh:
        try:
            file_reader = ipc.open_file(fh)  # random-access file format
        except pa.ArrowInvalid:
            fh.seek(0)
            yield from ipc.open_stream(fh)  # streaming format
            return
        for index in range(file_reader.num_record_batches):
            yield file_reader.get_batch(index)


def _csv_batches(path: str, batch_rows: int, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    fs, inner = _filesystem(path)
    convert = pacsv.ConvertOptions(column_types=schema) if schema is not None else None
    with fs.open_input_stream(inner, compression="detect") as fh:
        reader = pacsv.open_csv(fh, convert_options=convert)
        if schema is not None:
            _check_declared_present(path, reader.schema, schema)
        yield from reader


def _check_declared_present(path: str, found: pa.Schema, schema: pa.Schema) -> None:
    missing = [name for name in schema.names if name not in found.names]
    if missing:
        raise ConfigError(
            f"{path}: the declared schema names column(s) {missing} the file does not have (it has "
            f"{found.names}); correct the schema or the file"
        )


def _conform(path: str, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the declared columns cast to their declared types (a safe cast: no loss)."""
    _check_declared_present(path, batch.schema, schema)
    arrays = list(batch.columns)
    fields = list(batch.schema)
    for declared in schema:
        i = batch.schema.get_field_index(declared.name)
        try:
            arrays[i] = arrays[i].cast(declared.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ConfigError(
                f"{path}: column {declared.name!r} ({batch.schema.field(i).type}) does not fit the declared "
                f"type {declared.type}: {exc}. Fix: correct the file, or declare the type its values have"
            ) from None
        if not declared.nullable and arrays[i].null_count:
            raise ConfigError(
                f"{path}: column {declared.name!r} is declared NOT NULL but holds {arrays[i].null_count} "
                "null value(s). Fix: fill them, or declare the column nullable"
            )
        fields[i] = pa.field(declared.name, declared.type, declared.nullable, batch.schema.field(i).metadata)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, batch.schema.metadata))


def _rechunk(batches: Iterator[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, batch_rows):
            yield batch.slice(start, batch_rows)


def declared_columns(specs: Sequence[str] | None) -> dict[str, str] | None:
    """``["id=BIGINT NOT NULL", "ts=TIMESTAMP"]`` (the CLI's ``--schema``) -> ``{column: type}``."""
    if not specs:
        return None
    columns: dict[str, str] = {}
    for spec in specs:
        name, sep, type_text = spec.partition("=")
        if not sep or not name.strip() or not type_text.strip():
            raise ConfigError(
                f"--schema {spec!r}: write COLUMN=TYPE, e.g. ts=TIMESTAMP or price=DECIMAL(38,2)"
            )
        columns[name.strip()] = type_text.strip()
    return columns


def iter_file_batches(
    files: ResolvedFiles,
    batch_rows: int,
    schema: pa.Schema | Mapping[str, object] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every row of every file, in path order, as batches of at most ``batch_rows`` rows.

    With ``schema`` every file is read and converted once here, before this returns: bad input fails
    now, not after earlier files' rows were sent (module docstring).
    """
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be at least 1 (got {batch_rows})")
    declared = None if schema is None else arrow_schema_of_text(schema)
    if declared is not None:
        for _ in _batches(files, batch_rows, declared):
            pass
    return _batches(files, batch_rows, declared)


def _batches(files: ResolvedFiles, batch_rows: int, schema: pa.Schema | None) -> Iterator[pa.RecordBatch]:
    for path in files.paths:
        try:
            for batch in _rechunk(_read(files.format, path, batch_rows, schema), batch_rows):
                yield batch if schema is None else _conform(path, batch, schema)
        except (FileNotFoundError, pa.ArrowInvalid) as exc:
            # Bad input, not a transient failure: name the file so the fix is obvious.
            hint = (
                "; declare the column's type (schema=, or --schema COLUMN=TYPE on the CLI) if a later "
                "value does not fit the type inferred from the first rows"
                if schema is None and files.format is FileFormat.CSV
                else ""
            )
            raise ConfigError(f"cannot read {files.format.value} input {path}: {exc}{hint}") from exc


def _read(fmt: FileFormat, path: str, batch_rows: int, schema: pa.Schema | None) -> Iterator[pa.RecordBatch]:
    if fmt is FileFormat.CSV:
        return _csv_batches(path, batch_rows, schema)
    if fmt is FileFormat.ARROW:
        return _arrow_batches(path, batch_rows)
    return _parquet_batches(path, batch_rows)
