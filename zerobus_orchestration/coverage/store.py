"""Gap-aware delivered ranges, kept in a SQLite file beside the raw table.

A row of the store says: in table T, sink S durably delivered positions ``[start, end)`` of
(source, partition). Ranges of one key are always stored normalised (disjoint, non-adjacent); a write
*union-merges* into them inside one ``BEGIN IMMEDIATE`` transaction, so concurrent writers from several
threads or processes can never overwrite each other's ranges (no last-write-wins).

Design: one store object per target table. ``CoverageStore(location, table)`` binds the table, so the
ack lane keeps calling ``record(key, span)`` (the ``CoverageRecorder`` protocol) with no table argument
while every row still carries the table (``table_catalog``, ``table_schema``, ``table_name``
columns) and several tables share one file. Queries are scoped to the bound table.

Coverage never leads the table. Two writers add ranges: the ack lane, only after a durable ``RawAnchor``
acknowledgement, and a resume's catch-up, with positions it read in the table itself
(``resume/truth.py``). One caller removes them: ``forget``, for the runs a ``replace`` has just deleted
from the table (``runtime/supersede.py``). Merges never shrink a range.

Beside the ranges, ``coverage_digests`` keeps the content digest of each delivered batch (see
``coverage/digest.py``), written in the same transaction as the batch's range. Digests are append-only, one
row per delivered batch, never merged: a resume checks its input against them before skipping.
Schema version 2 added that table; a version 1 file is upgraded in place (the table is only added),
and its ranges, recorded without digests, are resumed unverified with a warning.

Version 3 keeps the state small as history grows (``coverage/compaction.py``): ``coverage_keys`` holds,
per key, when this host first took it up (``first_seen_us``, before any row of it was emitted or looked
up here) and last recorded it (``last_recorded_us``); ``coverage_digest_packs`` holds the content
digests of a settled key packed into one row (the same digests, a fraction of the rows). ``digests``
returns packed and loose records alike, so a resume checks its input exactly as before compaction.
A version 2 file is upgraded in place: both tables are added and every key it holds is taken as
recorded at the upgrade.

Each lane kind commits into its own file: the raw lane (and everything else that records) into the
configured location, the derived lane into the file beside it (``derived_lane_path``:
``coverage.sqlite`` -> ``coverage.derived.sqlite``, through ``derived_lane()``). SQLite has one write
lock per file, so a derived lane whose commit stalls (a slow disk, another process holding its file)
never holds the raw lane's commit, and with it the raw lane's acknowledgements. The store's queries read
both files (ranges merged, digests of the derived file after this file's); a reader never creates the
derived file.

SQLite's locking needs a local filesystem: for an ``s3://`` warehouse the default file lives in the local
``zerobus.state_dir`` (see ``ZerobusConfig.state_path``), never on the object store. Each thread gets its
own connection; a store inherited across ``fork`` opens fresh connections in the child and never touches
the parent's.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from zerobus_orchestration import intervals
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.coverage.packs import pack_digests, unpack_digests
from zerobus_orchestration.coverage.sqlite_wal import enable_wal
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.locations import is_local, local_path
from zerobus_orchestration.owner_only import private_file
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.tables import TableName

SCHEMA_VERSION = 3
_UPGRADABLE_VERSIONS = (1, 2)  # older versions this release upgrades in place (additive changes only)
DEFAULT_BUSY_TIMEOUT_S = 30.0

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS coverage_ranges (
        table_catalog TEXT NOT NULL,
        table_schema  TEXT NOT NULL,
        table_name    TEXT NOT NULL,
        sink          TEXT NOT NULL,
        source        TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        start_offset  INTEGER NOT NULL CHECK (start_offset >= 0),
        end_offset    INTEGER NOT NULL CHECK (end_offset > start_offset),
        PRIMARY KEY (table_catalog, table_schema, table_name, sink, source, partition_key, start_offset)
    ) WITHOUT ROWID
    """,
    # covered_by_source() unions across sinks; without this index it would scan the whole table.
    """
    CREATE INDEX IF NOT EXISTS coverage_by_source
        ON coverage_ranges (table_catalog, table_schema, table_name, source, partition_key, start_offset)
    """,
    # Version 2. One row per delivered batch; ``runs`` is NULL when the batch held every position of
    # [start_offset, end_offset), else its exact ranges as "start-end,start-end" (declared offsets).
    # ``seq`` (the rowid) orders records: a later one supersedes the earlier ones it overlaps.
    """
    CREATE TABLE IF NOT EXISTS coverage_digests (
        seq           INTEGER PRIMARY KEY,
        table_catalog TEXT NOT NULL,
        table_schema  TEXT NOT NULL,
        table_name    TEXT NOT NULL,
        sink          TEXT NOT NULL,
        source        TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        start_offset  INTEGER NOT NULL CHECK (start_offset >= 0),
        end_offset    INTEGER NOT NULL CHECK (end_offset > start_offset),
        row_count     INTEGER NOT NULL CHECK (row_count > 0),
        runs          TEXT,
        algorithm     TEXT NOT NULL,
        digest        BLOB NOT NULL
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS coverage_digests_by_key
        ON coverage_digests (table_catalog, table_schema, table_name, sink, source, partition_key, seq)
    """,
    # Version 3. Times in microseconds since the epoch (this host's clock). ``first_seen_us``: when a
    # write of the key first started on this host (NULL for keys a version 2 file held); every row this
    # host emitted or looked up for the key came after it.
    """
    CREATE TABLE IF NOT EXISTS coverage_keys (
        table_catalog    TEXT NOT NULL,
        table_schema     TEXT NOT NULL,
        table_name       TEXT NOT NULL,
        sink             TEXT NOT NULL,
        source           TEXT NOT NULL,
        partition_key    TEXT NOT NULL,
        first_seen_us    INTEGER,
        last_recorded_us INTEGER NOT NULL,
        PRIMARY KEY (table_catalog, table_schema, table_name, sink, source, partition_key)
    ) WITHOUT ROWID
    """,
    # Version 3. A key's settled digests of one algorithm, packed (``coverage/compaction.py`` encodes
    # ``body``); they are older than every loose ``coverage_digests`` record of the key.
    """
    CREATE TABLE IF NOT EXISTS coverage_digest_packs (
        table_catalog TEXT NOT NULL,
        table_schema  TEXT NOT NULL,
        table_name    TEXT NOT NULL,
        sink          TEXT NOT NULL,
        source        TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        algorithm     TEXT NOT NULL,
        entries       INTEGER NOT NULL CHECK (entries > 0),
        body          BLOB NOT NULL,
        PRIMARY KEY (table_catalog, table_schema, table_name, sink, source, partition_key, algorithm)
    ) WITHOUT ROWID
    """,
)
# Version 2 -> 3: the keys a file already holds count as recorded at the upgrade (retention starts then).
_KEYS_OF_AN_UPGRADED_FILE = """
    INSERT OR IGNORE INTO coverage_keys (table_catalog, table_schema, table_name, sink, source,
        partition_key, first_seen_us, last_recorded_us)
    SELECT DISTINCT table_catalog, table_schema, table_name, sink, source, partition_key, NULL, ?
    FROM coverage_ranges
"""
_KEY_TABLES = ("coverage_ranges", "coverage_digests", "coverage_digest_packs", "coverage_keys")

DERIVED_LANE_SUFFIX = ".derived"
_DERIVED_SEQ_BASE = 1 << 48
"""Digest ``seq`` of the derived lane's file is shifted by this: its records read as the later ones."""

_TABLE_FILTER = "table_catalog = ? AND table_schema = ? AND table_name = ?"
_KEY_FILTER = f"{_TABLE_FILTER} AND sink = ? AND source = ? AND partition_key = ?"


def coverage_path(location: str | os.PathLike[str]) -> Path:
    """The local file behind a coverage location; refuses object-store URIs SQLite cannot lock."""
    text = os.fspath(location)
    if not is_local(text):
        raise ConfigError(
            f"coverage location {text!r} is not a local file: SQLite needs a local filesystem. "
            "Fix: set zerobus.coverage.location (ZEROBUS_COVERAGE__LOCATION) to a local path."
        )
    return Path(local_path(text))


def derived_lane_path(path: Path) -> Path:
    """The derived lane's file beside ``path``: ``coverage.sqlite`` -> ``coverage.derived.sqlite``."""
    return path.with_name(f"{path.stem}{DERIVED_LANE_SUFFIX}{path.suffix}")


class CoverageStore:
    """Delivered ranges for one target table, in a SQLite file that many processes may share.

    Implements ``ranges.CoverageRecorder``. Thread-safe; safe for several processes writing at once.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        table: TableName | str,
        *,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        self.path = coverage_path(location)
        self.table = TableName.parse(table) if isinstance(table, str) else table
        self._busy_timeout_s = busy_timeout_s
        self._table_params = (self.table.catalog, self.table.schema, self.table.table)
        self._local = threading.local()
        self._registry_lock = threading.Lock()
        self._opened: list[tuple[int, sqlite3.Connection]] = []
        self._closed = False
        self._derived: CoverageStore | None = None  # the derived lane's store, made on first use
        self._is_lane_file = False  # this store is another store's derived lane (it has none itself)
        private_file(self.path)  # 0600 before SQLite opens it: its -wal and -shm files take its mode

    @classmethod
    def from_config(cls, config: ZerobusConfig, table: TableName | str) -> CoverageStore:
        """The store at ``config.coverage_location`` (default ``<state_dir>/coverage.sqlite``)."""
        return cls(config.coverage_location, table)

    # -- lanes ------------------------------------------------------------------------------------

    def derived_lane(self) -> CoverageStore:
        """The store the derived lane records into: this table, in its own file beside this one.

        Its commits take that file's write lock, never this one's, so a stalled derived commit cannot
        hold the raw lane's. This store's queries read what it records."""
        with self._registry_lock:
            if self._derived is None:
                lane = CoverageStore(
                    derived_lane_path(self.path), self.table, busy_timeout_s=self._busy_timeout_s
                )
                lane._is_lane_file = True
                self._derived = lane
            return self._derived

    def _lane_stores(self) -> list[CoverageStore]:
        """The derived lane's store, if its file exists (a reader never creates it)."""
        if self._is_lane_file:
            return []
        if self._derived is None and not derived_lane_path(self.path).is_file():
            return []
        lane = self.derived_lane()
        return [lane] if lane.path.is_file() else []

    # -- writes -----------------------------------------------------------------------------------

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        """Union-merge one durably delivered span into ``key``'s coverage."""
        self.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        """Union-merge several spans in one transaction (one ack-lane drain, one commit)."""
        self.record_delivered(items, ())

    def record_delivered(
        self, items: Iterable[tuple[CoverageKey, OffsetRange]], digests: Iterable[RangeDigest]
    ) -> None:
        """Union-merge spans and append their batches' content digests, in one transaction.

        One transaction, so a range is never durable in the store without the digest that vouches for
        it (a crash in between would leave a range a resume cannot verify).
        """
        by_key: dict[CoverageKey, list[OffsetRange]] = defaultdict(list)
        for key, span in items:
            by_key[key].append(span)
        batches = {key: intervals.merge(spans) for key, spans in by_key.items()}
        batches = {key: spans for key, spans in batches.items() if spans}
        vouched = list(digests)
        rows = [self._digest_row(digest) for digest in vouched]
        if not batches and not rows:
            return
        conn = self._connection()
        recorded = {*batches, *(digest.key for digest in vouched)}
        now = _now_us()
        with _immediate(conn):
            for key, spans in batches.items():
                for span in spans:
                    self._merge_span(conn, key, span)
            conn.executemany(
                "INSERT INTO coverage_keys (table_catalog, table_schema, table_name, sink, source, "
                "partition_key, first_seen_us, last_recorded_us) VALUES (?, ?, ?, ?, ?, ?, NULL, ?) "
                "ON CONFLICT DO UPDATE SET "
                "last_recorded_us = max(last_recorded_us, excluded.last_recorded_us)",
                [(*self._key_params(key), now) for key in recorded],
            )
            if rows:
                conn.executemany(
                    "INSERT INTO coverage_digests (table_catalog, table_schema, table_name, sink, source, "
                    "partition_key, start_offset, end_offset, row_count, runs, algorithm, digest) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

    def _digest_row(self, digest: RangeDigest) -> tuple[object, ...]:
        runs = None if digest.runs is None else ",".join(f"{r.start}-{r.end}" for r in digest.runs)
        return (
            *self._key_params(digest.key),
            digest.span.start,
            digest.span.end,
            digest.rows,
            runs,
            digest.algorithm,
            digest.digest,
        )

    def _merge_span(self, conn: sqlite3.Connection, key: CoverageKey, span: OffsetRange) -> None:
        # Every stored range that overlaps or touches the span is folded into one range; the others
        # are untouched. Runs inside BEGIN IMMEDIATE, so no other writer can interleave.
        touching = [
            OffsetRange(start, end)
            for start, end in conn.execute(
                f"SELECT start_offset, end_offset FROM coverage_ranges WHERE {_KEY_FILTER} "
                "AND start_offset <= ? AND end_offset >= ?",
                (*self._key_params(key), span.end, span.start),
            )
        ]
        (merged,) = intervals.union(touching, [span])
        if touching == [merged]:
            return  # already covered: idempotent, no write
        conn.executemany(
            f"DELETE FROM coverage_ranges WHERE {_KEY_FILTER} AND start_offset = ?",
            [(*self._key_params(key), old.start) for old in touching],
        )
        conn.execute(
            "INSERT INTO coverage_ranges (table_catalog, table_schema, table_name, sink, source, "
            "partition_key, start_offset, end_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*self._key_params(key), merged.start, merged.end),
        )

    def forget(self, keys: Iterable[CoverageKey]) -> None:
        """Drop every range and digest of ``keys``: their rows were deleted (a ``replace`` write).

        From both lanes' files: wherever they were recorded, coverage must not claim deleted rows."""
        listed = list(keys)
        for lane in self._lane_stores():
            lane.forget(listed)
        params = [self._key_params(key) for key in listed]
        if not params:
            return
        conn = self._connection()
        with _durable(conn), _immediate(conn):
            for table in _KEY_TABLES:
                conn.executemany(f"DELETE FROM {table} WHERE {_KEY_FILTER}", params)

    def touch(self, key: CoverageKey, *, at_us: int | None = None) -> int | None:
        """Note that this host took ``key`` up at ``at_us`` (default now); returns the earlier note.

        The earliest note is kept (``first_seen``): this host looked ``key`` up in the table, or sent
        rows of it without looking, no earlier, and every row of it this host knows of was stamped no
        earlier (``resume.truth.emission_bound``). None: this host never took ``key`` up before."""
        conn = self._connection()
        now = _now_us()
        at = now if at_us is None else at_us
        with _immediate(conn):
            before = self._first_seen(conn, key)
            conn.execute(
                "INSERT INTO coverage_keys (table_catalog, table_schema, table_name, sink, source, "
                "partition_key, first_seen_us, last_recorded_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO UPDATE SET first_seen_us = "
                "min(coalesce(first_seen_us, excluded.first_seen_us), excluded.first_seen_us)",
                (*self._key_params(key), at, now),
            )
        return before

    def first_seen(self, key: CoverageKey) -> int | None:
        """When a write of ``key`` first started on this host (µs since the epoch); None if unknown."""
        return self._first_seen(self._connection(), key)

    def _first_seen(self, conn: sqlite3.Connection, key: CoverageKey) -> int | None:
        row = conn.execute(
            f"SELECT first_seen_us FROM coverage_keys WHERE {_KEY_FILTER}", self._key_params(key)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def idle_keys(
        self, *, recorded_before_us: int, limit: int, with_loose_digests: bool = False
    ) -> tuple[CoverageKey, ...]:
        """Up to ``limit`` keys last recorded before the given time, oldest first; only those that still
        have loose (unpacked) digest records with ``with_loose_digests``."""
        loose = (
            " AND EXISTS (SELECT 1 FROM coverage_digests d WHERE d.table_catalog = k.table_catalog AND "
            "d.table_schema = k.table_schema AND d.table_name = k.table_name AND d.sink = k.sink AND "
            "d.source = k.source AND d.partition_key = k.partition_key)"
            if with_loose_digests
            else ""
        )
        rows = self._connection().execute(
            "SELECT k.sink, k.source, k.partition_key FROM coverage_keys k WHERE k.table_catalog = ? AND "
            f"k.table_schema = ? AND k.table_name = ? AND k.last_recorded_us < ?{loose} "
            "ORDER BY k.last_recorded_us LIMIT ?",
            (*self._table_params, recorded_before_us, limit),
        )
        return tuple(CoverageKey(sink, source, part) for sink, source, part in rows)

    def recorded_since(self, since_us: int) -> tuple[CoverageKey, ...]:
        """Keys a write recorded coverage of at or after ``since_us`` (µs since the epoch), every lane's:
        rows this host delivered lately, which the table may not show yet (``runtime/settled_runs.py``)."""
        every = {*self._own_recorded_since(since_us)}
        for lane in self._lane_stores():
            every.update(lane._own_recorded_since(since_us))
        return tuple(sorted(every, key=lambda k: (k.sink, k.source, k.partition)))

    def _own_recorded_since(self, since_us: int) -> tuple[CoverageKey, ...]:
        rows = self._connection().execute(
            f"SELECT sink, source, partition_key FROM coverage_keys WHERE {_TABLE_FILTER} "
            "AND last_recorded_us >= ?",
            (*self._table_params, since_us),
        )
        return tuple(CoverageKey(sink, source, part) for sink, source, part in rows)

    def repack(
        self, key: CoverageKey, select: Callable[[tuple[RangeDigest, ...]], Iterable[RangeDigest]]
    ) -> int:
        """Replace every digest record of ``key`` (packed and loose) by the packed ``select(records)``,
        in one transaction; returns how many loose records it took in. A resume then reads the same
        records ``select`` kept (``digests``)."""
        conn = self._connection()
        with _immediate(conn):
            loose = self._loose_digests(conn, key)
            if not loose:
                return 0
            packed = [
                d
                for algorithm, body in conn.execute(
                    f"SELECT algorithm, body FROM coverage_digest_packs WHERE {_KEY_FILTER}",
                    self._key_params(key),
                )
                for d in unpack_digests(key, algorithm, bytes(body))
            ]
            first = 1 - len(packed)
            every = (*(replace(d, seq=first + i) for i, d in enumerate(packed)), *loose)
            kept = sorted(select(every), key=lambda d: (d.algorithm, d.span.start))
            for table in ("coverage_digests", "coverage_digest_packs"):
                conn.execute(f"DELETE FROM {table} WHERE {_KEY_FILTER}", self._key_params(key))
            for _, group in itertools.groupby(kept, key=lambda d: d.algorithm):
                algorithm, entries, body = pack_digests(group)
                conn.execute(
                    "INSERT INTO coverage_digest_packs (table_catalog, table_schema, table_name, sink, "
                    "source, partition_key, algorithm, entries, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*self._key_params(key), algorithm, entries, body),
                )
        return len(loose)

    def drop(self, keys: Iterable[CoverageKey]) -> None:
        """Let go of everything kept for ``keys`` (retention): their rows stay in the table, which a later
        resume reads instead (``resume/truth.py``). Coverage then lags the table, never leads it, so this
        commits like a record (``synchronous = NORMAL``), not like ``forget``."""
        params = [self._key_params(key) for key in keys]
        if not params:
            return
        conn = self._connection()
        with _immediate(conn):
            for table in _KEY_TABLES:
                conn.executemany(f"DELETE FROM {table} WHERE {_KEY_FILTER}", params)

    # -- queries ----------------------------------------------------------------------------------

    def ranges(self, key: CoverageKey) -> tuple[OffsetRange, ...]:
        """Covered ranges of ``key``, sorted, disjoint, non-adjacent (both lanes' files)."""
        lanes = self._lane_stores()
        if not lanes:
            return self._own_ranges(key)
        return intervals.union(self._own_ranges(key), *(lane._own_ranges(key) for lane in lanes))

    def _own_ranges(self, key: CoverageKey) -> tuple[OffsetRange, ...]:
        rows = self._connection().execute(
            f"SELECT start_offset, end_offset FROM coverage_ranges WHERE {_KEY_FILTER} ORDER BY start_offset",
            self._key_params(key),
        )
        return tuple(OffsetRange(start, end) for start, end in rows)

    def digests(self, key: CoverageKey) -> tuple[RangeDigest, ...]:
        """Every content digest recorded for ``key``, oldest first (``seq`` order).

        Packed digests (``coverage/compaction.py``) come first, with ``seq`` below 1: they are older than
        every loose record (a pack takes all of a key's loose records at once). The derived lane's file's
        follow, their ``seq`` shifted past this file's: a key recorded in both (coverage recorded before
        the lanes had a file each) reads the derived lane's records as the later ones."""
        own = self._own_digests(key)
        lanes = self._lane_stores()
        if not lanes:
            return own
        shifted = [
            replace(d, seq=d.seq + _DERIVED_SEQ_BASE) for lane in lanes for d in lane._own_digests(key)
        ]
        return (*own, *shifted)

    def _own_digests(self, key: CoverageKey) -> tuple[RangeDigest, ...]:
        conn = self._connection()
        with _snapshot(conn):  # a compaction moving records between the two tables is seen whole
            packs = conn.execute(
                f"SELECT algorithm, body FROM coverage_digest_packs WHERE {_KEY_FILTER} ORDER BY algorithm",
                self._key_params(key),
            ).fetchall()
            loose = self._loose_digests(conn, key)
        packed = [d for algorithm, body in packs for d in unpack_digests(key, algorithm, bytes(body))]
        first = 1 - len(packed)
        return (*(replace(d, seq=first + i) for i, d in enumerate(packed)), *loose)

    def _loose_digests(self, conn: sqlite3.Connection, key: CoverageKey) -> tuple[RangeDigest, ...]:
        rows = conn.execute(
            "SELECT seq, start_offset, end_offset, row_count, runs, algorithm, digest FROM coverage_digests "
            f"WHERE {_KEY_FILTER} ORDER BY seq",
            self._key_params(key),
        )
        return tuple(
            RangeDigest(
                key,
                OffsetRange(start, end),
                None if runs is None else _parse_runs(runs),
                count,
                bytes(digest),
                algorithm,
                seq,
            )
            for seq, start, end, count, runs, algorithm, digest in rows
        )

    def gaps(self, key: CoverageKey, n: int) -> tuple[OffsetRange, ...]:
        """The parts of ``[0, n)`` that ``key`` has not covered."""
        return intervals.gaps(self.ranges(key), n)

    def high_water(self, key: CoverageKey) -> int:
        """Contiguous high-water: every position below it is covered (the first gap's start)."""
        return intervals.high_water(self.ranges(key))

    def keys(self, sink: str | None = None, source: str | None = None) -> tuple[CoverageKey, ...]:
        """Keys with any coverage in this table, optionally filtered by sink and/or source."""
        lanes = self._lane_stores()
        own = self._own_keys(sink, source)
        if not lanes:
            return own
        every = {*own, *(k for lane in lanes for k in lane._own_keys(sink, source))}
        return tuple(sorted(every, key=lambda k: (k.sink, k.source, k.partition)))

    def _own_keys(self, sink: str | None, source: str | None) -> tuple[CoverageKey, ...]:
        sql = f"SELECT DISTINCT sink, source, partition_key FROM coverage_ranges WHERE {_TABLE_FILTER}"
        params: list[str] = list(self._table_params)
        if sink is not None:
            sql += " AND sink = ?"
            params.append(sink)
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        rows = self._connection().execute(sql + " ORDER BY sink, source, partition_key", params)
        return tuple(CoverageKey(s, src, part) for s, src, part in rows)

    def covered_by_source(self, source: str, partition: str = "") -> tuple[OffsetRange, ...]:
        """Union across every sink of what (source, partition) has delivered: the input to a resume."""
        lanes = self._lane_stores()
        own = self._own_covered_by_source(source, partition)
        if not lanes:
            return own
        return intervals.union(own, *(lane._own_covered_by_source(source, partition) for lane in lanes))

    def _own_covered_by_source(self, source: str, partition: str) -> tuple[OffsetRange, ...]:
        rows = self._connection().execute(
            f"SELECT start_offset, end_offset FROM coverage_ranges WHERE {_TABLE_FILTER} "
            "AND source = ? AND partition_key = ?",
            (*self._table_params, source, partition),
        )
        return intervals.merge(OffsetRange(start, end) for start, end in rows)

    def all_for_table(self) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        """Every key of this table with its ranges (each lane's file read from one consistent snapshot)."""
        own = self._own_all_for_table()
        for lane in self._lane_stores():
            for key, spans in lane._own_all_for_table().items():
                own[key] = intervals.union(own.get(key, ()), spans)
        return own

    def _own_all_for_table(self) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        rows = self._connection().execute(
            "SELECT sink, source, partition_key, start_offset, end_offset FROM coverage_ranges "
            f"WHERE {_TABLE_FILTER} ORDER BY sink, source, partition_key, start_offset",
            self._table_params,
        )
        grouped: dict[CoverageKey, list[OffsetRange]] = defaultdict(list)
        for sink, source, partition, start, end in rows:
            grouped[CoverageKey(sink, source, partition)].append(OffsetRange(start, end))
        return {key: tuple(spans) for key, spans in grouped.items()}

    # -- connections ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections this process opened. The files and their ranges stay."""
        if self._derived is not None:
            self._derived.close()
        pid = os.getpid()
        with self._registry_lock:
            self._closed = True
            mine = [conn for owner, conn in self._opened if owner == pid]
            self._opened = [(owner, conn) for owner, conn in self._opened if owner != pid]
        for conn in mine:
            conn.close()

    def __enter__(self) -> CoverageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _key_params(self, key: CoverageKey) -> tuple[str, ...]:
        return (*self._table_params, key.sink, key.source, key.partition)

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError(f"coverage store {self.path} for {self.table} is closed")
        pid = os.getpid()
        cached: tuple[int, sqlite3.Connection] | None = getattr(self._local, "conn", None)
        if cached is not None and cached[0] == pid:
            return cached[1]
        # A connection inherited through fork must never be used by the child: open a fresh one.
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # explicit transactions only: BEGIN IMMEDIATE around every merge
            check_same_thread=False,  # close() may run on another thread; use stays per-thread
        )
        try:
            _configure(conn, self._busy_timeout_s)
        except BaseException:
            conn.close()
            raise
        with self._registry_lock:
            self._opened.append((pid, conn))
        self._local.conn = (pid, conn)
        return conn


def _configure(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    # WAL lets readers run while one process merges. NORMAL: a commit is in the WAL file (the OS's page
    # cache) when COMMIT returns, so it survives a crash of this process; only an OS crash or power loss
    # can lose the newest commits, and WAL recovery keeps a prefix of them. Recording only ever adds
    # coverage, so what such a loss drops is the latest delivered ranges: coverage lags and a resume
    # re-sends them (duplicates), it never skips. ``forget`` is the one change whose loss would make
    # coverage lead (claim deleted rows), so it commits with FULL (see ``_durable``).
    enable_wal(conn, busy_timeout_s)
    conn.execute(f"PRAGMA synchronous = {_APPEND_SYNC}")
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        # The version is set in the transaction that creates the schema, so the schema is complete:
        # every later connection (each write's ack lane opens one) skips the write lock and the DDL.
        return
    with _immediate(conn):  # schema creation races with other processes opening the same file
        for statement in _SCHEMA:
            conn.execute(statement)
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version == 0 or version in _UPGRADABLE_VERSIONS:
            # New file, or an older one: the statements above only added what it lacked.
            if version in _UPGRADABLE_VERSIONS:
                conn.execute(_KEYS_OF_AN_UPGRADED_FILE, (_now_us(),))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise ConfigError(
                f"coverage file has schema version {version}, this release reads {SCHEMA_VERSION}. "
                "Fix: upgrade zerobus-orchestration, or point zerobus.coverage.location at a new file."
            )


def _now_us() -> int:
    return time.time_ns() // 1_000


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: the enclosed queries see one committed state of the file."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _parse_runs(text: str) -> tuple[OffsetRange, ...]:
    runs = []
    for part in text.split(","):
        start, end = part.split("-")
        runs.append(OffsetRange(int(start), int(end)))
    return tuple(runs)


_APPEND_SYNC = "NORMAL"  # recording ranges and digests: may lag after power loss, never lead


@contextmanager
def _durable(conn: sqlite3.Connection) -> Iterator[None]:
    """Commit the enclosed transaction with an fsync (``synchronous = FULL``), then back to NORMAL.

    A forget is durable when it returns, as before: its rows are (being) deleted, and a lost forget
    would leave coverage claiming them. In WAL mode the fsync covers every earlier commit too."""
    conn.execute("PRAGMA synchronous = FULL")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA synchronous = {_APPEND_SYNC}")


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes SQLite's write lock up front (waiting up to the busy timeout)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT leaves the transaction open; never leak it
            conn.execute("ROLLBACK")
        raise
