"""Files and globs -> a re-readable input of Arrow record batches, with bounded memory (CLI, Airflow, Python).

Order matters: a retried try resumes by row position from coverage, so the same inputs must yield the
same rows in the same order. Globs are expanded and sorted; every file is read sequentially, batch by
batch (Parquet row groups via ``iter_batches``, Arrow IPC record batches, CSV blocks via the streaming
reader), so memory stays at about one batch whatever the file size.

``FileInput`` (``read_files``) can be read more than once: ``ZerobusRuntime.write`` reads it whole first,
checking every row against the table (``sink/input_check.py``), and only then again to send it (a CSV
file from a spool of its parsed rows instead, ``spool.py``), so a bad value anywhere refuses the write
with nothing sent. ``located()`` says where each batch comes from (the
file and its first row there), for the refusal's message. ``DatasetInput`` is the same for a
``pyarrow.dataset.Dataset``.

A declared ``schema`` (``{column: "type"}`` or a ``pyarrow.Schema``; ``schema_text`` spells the types)
fixes the named columns' types instead of inferring them: CSV is parsed with those types (a timestamp
or decimal written as text, a column whose first rows are empty), Parquet and Arrow columns are cast.
CSV's NULL spelling and its conversion errors are ``csv_input``'s.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from zerobus_orchestration.csv_input import conversion_error, convert_options
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.schema_text import arrow_schema_of_text

if TYPE_CHECKING:
    import pyarrow.dataset as pads

DEFAULT_BATCH_ROWS = 65_536

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


@dataclass(frozen=True)
class Located:
    """A batch of an input, and where it comes from: ``where`` (e.g. the file) and its first row there."""

    batch: pa.RecordBatch
    where: str
    first_row: int  # 0-based, within ``where``


@runtime_checkable
class Rereadable(Protocol):
    """Input that can be read again from the start, the same rows in the same order each time."""

    def located(self) -> Iterator[Located]:
        """Every batch, in order, with where it comes from."""
        ...

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every batch, in order (what is sent)."""
        ...

    def empty_schema(self) -> pa.Schema | None:
        """The schema the input declares even when it holds no row (None: it declares none)."""
        ...


class FileInput:
    """Files to write, read again on each iteration (module docstring). Build with ``read_files``."""

    def __init__(
        self,
        files: ResolvedFiles,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        schema: pa.Schema | Mapping[str, object] | None = None,
        csv_null_values: Sequence[str] | None = None,
    ) -> None:
        if batch_rows < 1:
            raise ConfigError(f"batch_rows must be at least 1 (got {batch_rows})")
        self.files = files
        self.batch_rows = batch_rows
        self.declared = None if schema is None else arrow_schema_of_text(schema)
        self.csv_null_values = None if csv_null_values is None else tuple(csv_null_values)

    @property
    def paths(self) -> tuple[str, ...]:
        return self.files.paths

    @property
    def format(self) -> FileFormat:
        return self.files.format

    def __repr__(self) -> str:
        return f"FileInput({len(self.paths)} {self.format.value} file(s): {list(self.paths[:3])})"

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every row of every file, in path order, as batches of at most ``batch_rows`` rows."""
        for located in self.located():
            yield located.batch

    def located(self) -> Iterator[Located]:
        for path in self.paths:
            first_row = 0
            for batch in self._file_batches(path):
                yield Located(batch, path, first_row)
                first_row += batch.num_rows

    def empty_schema(self) -> pa.Schema | None:
        """The first file's own schema (Parquet footer, IPC header, CSV header and first block) with the
        declared types applied, so an input without a row creates the table its first row would have."""
        if not self.paths:
            return None
        path = self.paths[0]
        try:
            found = self._read_schema(path)
        except (FileNotFoundError, pa.ArrowInvalid) as exc:
            raise ConfigError(f"cannot read {self.format.value} input {path}: {exc}") from exc
        if self.declared is None:
            return found
        _check_declared_present(path, found, self.declared)
        fields = list(found)
        for field in self.declared:
            index = found.get_field_index(field.name)
            fields[index] = pa.field(field.name, field.type, field.nullable, found.field(index).metadata)
        return pa.schema(fields, found.metadata)

    def _file_batches(self, path: str) -> Iterator[pa.RecordBatch]:
        schema = self.declared
        try:
            for batch in _rechunk(self._read(path), self.batch_rows):
                yield batch if schema is None else _conform(path, batch, schema)
        except (FileNotFoundError, pa.ArrowInvalid) as exc:
            # Bad input, not a transient failure: name the file so the fix is obvious.
            raise ConfigError(f"cannot read {self.format.value} input {path}: {exc}") from exc

    def _read(self, path: str) -> Iterator[pa.RecordBatch]:
        if self.format is FileFormat.CSV:
            return self._csv_batches(path)
        if self.format is FileFormat.ARROW:
            return _arrow_batches(path)
        return _parquet_batches(path, self.batch_rows)

    def _csv_batches(self, path: str, include: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        fs, inner = _filesystem(path)
        declared = self.declared
        if include is not None:  # one column as text (``csv_input.conversion_error``)
            declared = pa.schema([pa.field(name, pa.string()) for name in include])
        convert = convert_options(declared, self.csv_null_values, include=include)
        with fs.open_input_stream(inner, compression="detect") as fh:
            reader: pacsv.CSVStreamingReader | None = None
            try:
                reader = pacsv.open_csv(fh, convert_options=convert)  # converts the first block
                if include is None and self.declared is not None:
                    _check_declared_present(path, reader.schema, self.declared)
                yield from reader
            except pa.ArrowInvalid as exc:
                if include is not None:
                    raise
                raise conversion_error(
                    path,
                    exc,
                    found=reader.schema if reader is not None else self._csv_columns(path),
                    declared=self.declared,
                    as_text=lambda column: self._csv_batches(path, include=[column]),
                ) from None

    def _csv_columns(self, path: str) -> pa.Schema:
        """The file's columns with the types its first block is converted to (declared or inferred)."""
        fs, inner = _filesystem(path)
        with fs.open_input_stream(inner, compression="detect") as fh:
            inferred = pacsv.open_csv(fh, convert_options=convert_options(None, self.csv_null_values)).schema
        declared = self.declared
        if declared is None:
            return inferred
        return pa.schema(
            [declared.field(f.name) if declared.get_field_index(f.name) >= 0 else f for f in inferred]
        )

    def _read_schema(self, path: str) -> pa.Schema:
        fs, inner = _filesystem(path)
        if self.format is FileFormat.PARQUET:
            with fs.open_input_file(inner) as fh:
                return pq.read_schema(fh)
        if self.format is FileFormat.ARROW:
            with fs.open_input_file(inner) as fh:
                try:
                    return ipc.open_file(fh).schema
                except pa.ArrowInvalid:
                    fh.seek(0)
                    return ipc.open_stream(fh).schema
        convert = convert_options(self.declared, self.csv_null_values)
        with fs.open_input_stream(inner, compression="detect") as fh:
            return pacsv.open_csv(fh, convert_options=convert).schema


def read_files(
    path: str | Sequence[str],
    *,
    file_format: str | None = None,
    schema: pa.Schema | Mapping[str, object] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    csv_null_values: Sequence[str] | None = None,
) -> FileInput:
    """Parquet, Arrow IPC or CSV files (a path, a glob, a URI or a list of them) as one write's input.

    ``ZerobusRuntime.write(table, read_files(...), ...)`` checks every row of every file before it sends
    the first, so a bad value anywhere refuses the write with nothing sent and no table created.
    ``file_format``: ``parquet``, ``arrow`` or ``csv`` (default: from the suffixes). ``schema``: declared
    column types (``{column: "TYPE"}``), instead of inferred ones. ``csv_null_values``: the unquoted CSV
    fields that are NULL (default pyarrow's list, ``csv_input.DEFAULT_NULL_VALUES``; ``()``: none).
    """
    return FileInput(
        resolve_files(path, file_format),
        batch_rows=batch_rows,
        schema=schema,
        csv_null_values=csv_null_values,
    )


class DatasetInput:
    """A ``pyarrow.dataset.Dataset`` as a re-readable input: scanned in its fragments' order each time."""

    def __init__(self, dataset: pads.Dataset, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self.dataset = dataset
        self.batch_rows = batch_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        for located in self.located():
            yield located.batch

    def located(self) -> Iterator[Located]:
        rows: dict[str, int] = {}
        # ``scan_batches`` yields in fragment order, each batch with its fragment (for the message).
        scanner = self.dataset.scanner(batch_size=self.batch_rows)
        for tagged in scanner.scan_batches():
            where = str(getattr(tagged.fragment, "path", "") or "the dataset")
            first_row = rows.get(where, 0)
            rows[where] = first_row + tagged.record_batch.num_rows
            yield Located(tagged.record_batch, where, first_row)

    def empty_schema(self) -> pa.Schema:
        return self.dataset.schema


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    if "://" in path:
        fs, inner = pafs.FileSystem.from_uri(path)
        return fs, inner
    return pafs.LocalFileSystem(), path


def _parquet_batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    fs, inner = _filesystem(path)
    with fs.open_input_file(inner) as fh:
        yield from pq.ParquetFile(fh).iter_batches(batch_size=batch_rows)


def _arrow_batches(path: str) -> Iterator[pa.RecordBatch]:
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
