"""Files and globs -> an ordered stream of Arrow record batches, with bounded memory (CLI ingest, Airflow).

Order matters: a retried try resumes by row position from coverage, so the same inputs must yield the
same rows in the same order. Globs are expanded and sorted; every file is read sequentially, batch by
batch (Parquet row groups via ``iter_batches``, Arrow IPC record batches, CSV blocks via the streaming
reader), so memory stays at about one batch whatever the file size.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from zerobus_orchestration.errors import ConfigError

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


def _csv_batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    fs, inner = _filesystem(path)
    with fs.open_input_stream(inner, compression="detect") as fh:
        yield from pacsv.open_csv(fh)


def _rechunk(batches: Iterator[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, batch_rows):
            yield batch.slice(start, batch_rows)


def iter_file_batches(files: ResolvedFiles, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Every row of every file, in path order, as batches of at most ``batch_rows`` rows."""
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be at least 1 (got {batch_rows})")
    readers = {
        FileFormat.PARQUET: _parquet_batches,
        FileFormat.ARROW: _arrow_batches,
        FileFormat.CSV: _csv_batches,
    }
    read = readers[files.format]
    for path in files.paths:
        try:
            yield from _rechunk(read(path, batch_rows), batch_rows)
        except (FileNotFoundError, pa.ArrowInvalid) as exc:
            # Bad input, not a transient failure: name the file so the fix is obvious.
            raise ConfigError(f"cannot read {files.format.value} input {path}: {exc}") from exc
