"""Read-back as a read-only service: what a write delivered, checked against what Iceberg serves.

``ReadbackService`` needs catalog read access and the Iceberg REST endpoint; no stream pool, no
transport, no write runtime. It is the one entry the Dagster sensor, the Airflow sensor and trigger and
the CLI ``readback`` command use, and every attempt ends in one ``ReadbackOutcome`` they all branch on.

What to verify, first found wins (``ExpectedFrom``):

1. the write's own record (``readback.record.WriteRecord``: the materialisation's metadata, the ingest
   task's XCom), so the verifying host needs no file of the writer's;
2. the same-host coverage cache, when this host has one (the runtime's own service always does);
3. the table's own truth: every durable row carries ``(_twg_source, _twg_offset)``, so the delivered
   ranges are read from the Delta log (``table_truth``). Read-back then checks that everything durable
   in Delta is visible through Iceberg, reports positions Delta itself lacks as not durable (or lost,
   when a row-removal commit took them), and counts duplicates.

Lost or late, the same way in every mode: delivered positions a snapshot lacks are looked up in the
table's Delta log at the version the snapshot reflects (``coverage/absence.py``, only on that missing
path): held there, or taken by a row-removal commit after delivery, they are ``LOST``; in no version, not
committed yet (``INCOMPLETE``, waited for until the caller's deadline).

Embedded mode reads through the emulator's Iceberg REST facade: the runtime hands its own emulator over;
``from_config`` gets one through ``embedded.readback_emulator`` only when first needed (the warehouse's
shared daemon without a lease, or one in this process in ``in_process`` mode) and stops it on
``close``. Production reads Unity Catalog's Iceberg REST endpoint as the service principal, with a
token ``databricks-sdk`` refreshes (``readback.auth``) and the credentials Unity vends for the table.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from zerobus_orchestration import intervals
from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.catalog.factory import catalog_from_config
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.coverage.latest_run import CachedKeys, latest_run
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import ConfigError, NothingToVerifyError, ReadbackTimeoutError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.coverage_check import MissingRange
from zerobus_orchestration.readback.lost import LostCause, LostRange, MissingExplainer, lost_message
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
from zerobus_orchestration.resume.truth import emission_bound
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.write_modes import source_tag

# The Iceberg side of read-back (pyiceberg's catalog and REST client, ~1 s to import) is imported where
# it is first used: a process that only writes builds this service too (the runtime's delta_version and
# coverage_map) and never scans Iceberg.
if TYPE_CHECKING:
    from zerobus_orchestration.readback.auth import DatabricksOAuthHeader
    from zerobus_orchestration.readback.endpoint import IcebergEndpoint
    from zerobus_orchestration.readback.visibility import VisibilityProbe, WaitPolicy
    from zerobus_orchestration.runtime.embedded import EmulatorHandle

CoverageOf = Callable[[str], CoverageStore]
"""A table's full name -> its coverage store."""

UC_ICEBERG_REST_PATH = "/api/2.1/unity-catalog/iceberg-rest"
SINK_ID = "zerobus-orchestration"  # the runtime's sink id; names the key of a missing range


class ExpectedFrom(StrEnum):
    """Where the ranges a read-back verified came from (reported as ``expected_from``)."""

    RECORD = "write_record"
    CACHE = "coverage_cache"
    TABLE = "table_truth"


@dataclass(frozen=True)
class Expected:
    """The ranges to find through Iceberg, where they came from, and what the table itself lacks."""

    coverage: dict[CoverageKey, tuple[OffsetRange, ...]]
    origin: ExpectedFrom
    not_durable: tuple[MissingRange, ...] = ()  # positions the table itself lacks (table truth only)
    deleted: tuple[LostRange, ...] = ()  # of those, the ones a row-removal commit took (table truth only)
    # No row of these keys was stamped before it (``resume.truth.emission_bound``): the scan reads only
    # files of rows stamped since. None: unknown, every file whose tag statistics admit them is read.
    emitted_since: dt.datetime | None = None
    # The run a partition given without one was resolved to (``"<partition>@<run>"``), if it was.
    latest_run: str | None = None


class ReadbackService:
    """Verify and read back the rows of delivered tables; never writes a row."""

    def __init__(
        self,
        config: ZerobusConfig,
        *,
        catalog: TableCatalog,
        coverage: CoverageOf | None = None,
        emulator: EmulatorHandle | None = None,
        find_emulator: bool = False,
    ) -> None:
        """``coverage``: the owner's stores (the runtime's); ``None``: this host's cache if it has one.

        ``emulator``: the owner's (the runtime's). ``find_emulator``: embedded, with none handed in, get
        one on first need (``embedded.readback_emulator``) and stop it on ``close``.
        """
        self.config = config
        self.catalog = catalog
        self.emulator = emulator  # the embedded Iceberg endpoint; None once its owner stopped it
        self._owned: dict[str, CoverageStore] = {}
        self._lock = threading.Lock()
        self._shared_coverage = coverage is not None
        self._coverage: CoverageOf = coverage if coverage is not None else self._owned_store
        self._find_emulator = find_emulator and config.embedded and emulator is None
        self._own_emulator: EmulatorHandle | None = None
        self._oauth: DatabricksOAuthHeader | None = None

    @classmethod
    def from_config(cls, config: ZerobusConfig, *, emulator: EmulatorHandle | None = None) -> ReadbackService:
        """A standalone service from the config alone: its own catalog client, this host's coverage
        cache if there is one, and (embedded, unless ``emulator`` is given) the emulator it finds on
        first need. ``close`` it."""
        return cls(config, catalog=catalog_from_config(config), emulator=emulator, find_emulator=True)

    # -- what was delivered, and which Delta version holds it ------------------------------------------

    def delta_version(self, table: str) -> int | None:
        """The Delta version that holds everything acknowledged so far (embedded), else the live one.

        Embedded: the emulator commits its write-ahead log now, so the version returned contains every
        acknowledged row. Production: Zerobus commits asynchronously (time to table, P50 <= 5 s), so
        the version read from the catalog is a lower bound.
        """
        name = TableName.parse(table).full_name
        live = self.catalog.latest_version(name)
        if live is None:
            return None  # no table, or a log that gives no version yet: nothing to commit into
        emulator = self._emulator()
        if emulator is None:
            return live  # nothing commits on request: the version just read is the live one
        version = emulator.materialize_now(name)
        if version is not None:
            return int(version)
        # Nothing was left to commit: the emulator's own materialiser got there first. Read the
        # version after that, not before, or a concurrent commit would be missed.
        return self.catalog.latest_version(name)

    def coverage_map(
        self, table: str, *, source: str | None = None, partition: str | None = None
    ) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        """Coverage of ``table``, optionally narrowed to one source (and partition)."""
        everything = self._coverage(TableName.parse(table).full_name).all_for_table()
        if source is None:
            return everything
        if partition is not None:
            wanted = source_tag(source, partition)
            return {key: spans for key, spans in everything.items() if key.source == wanted}
        return {
            key: spans
            for key, spans in everything.items()
            if key.source == source or key.source.startswith(f"{source}[")
        }

    # -- Iceberg ---------------------------------------------------------------------------------------

    def iceberg(self) -> IcebergEndpoint:
        """The Iceberg REST endpoint and how to authenticate to it.

        Embedded: the emulator's facade with a token from the emulator. Production: Unity Catalog's
        endpoint (or ``readback.iceberg_rest_uri``) with ``readback.token`` if set, else the service
        principal's OAuth token, refreshed by ``databricks-sdk`` per request.
        """
        from zerobus_orchestration.readback.endpoint import IcebergEndpoint

        emulator = self._emulator()
        # The emulator's Iceberg REST facade requires a credential, like Unity Catalog's. Asked for
        # first: a shared daemon that idled out is replaced then, and its successor's URL read below.
        token = None if emulator is None or self.config.readback.token else emulator.access_token()
        default_uri = None if emulator is None else emulator.iceberg_rest_uri
        if default_uri is None and self.config.workspace_url:
            default_uri = self.config.workspace_url.rstrip("/") + UC_ICEBERG_REST_PATH
        endpoint = IcebergEndpoint.from_config(self.config.readback, default_uri=default_uri)
        if endpoint.token is not None:
            return endpoint
        if token is not None and endpoint.uri == default_uri:
            return replace(endpoint, token=token)
        if not self.config.embedded and self.config.client_id and self.config.client_secret is not None:
            return replace(endpoint, header=self._service_principal())
        return endpoint

    def expected(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
    ) -> Expected:
        """What to verify: the write's record (``ranges``), else this host's cache, else the table.

        A ``partition`` named without its run (Dagster writes ``"<partition key>@<run id>"``, a replace
        ``"<key>@<run>"``) stands for its latest run (``coverage/latest_run.py``); with no ``partition``
        and nothing cached for ``source``, the latest run of the source. Raises ``NothingToVerifyError``
        when none of them holds a delivered row.
        """
        name = TableName.parse(table).full_name
        if ranges is None and source is not None:
            run = latest_run(
                self.catalog, self.config, name, source, partition, cached=self._cached_keys(name, source)
            )
            if run is not None and run != partition:
                found = self.expected(name, source=source, partition=run)
                return replace(found, latest_run=run)
        if ranges is not None:
            if source is None:
                raise ConfigError(f"read-back of {name}: delivered ranges need the source they belong to")
            key = CoverageKey(SINK_ID, source_tag(source, partition or ""), partition or "")
            merged = intervals.merge(ranges)
            if not merged:
                raise self._nothing(name, source, partition, "the write's record holds no delivered row")
            return Expected(
                {key: merged}, ExpectedFrom.RECORD, emitted_since=self._emitted_since(name, [key])
            )
        if self._has_cache():
            cached = self.coverage_map(name, source=source, partition=partition)
            if cached:
                return Expected(cached, ExpectedFrom.CACHE, emitted_since=self._emitted_since(name, cached))
        if source is None:
            raise self._nothing(
                name, source, partition, "no write record and no coverage on this host; name the --source"
            )
        return self._expected_from_table(name, source, partition or "")

    def verify_once(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
        replaces: str | None = None,
    ) -> ReadbackOutcome:
        """One non-blocking, judged attempt (sensors, triggers): never raises for a read-back failure.

        ``ranges``: the write's own record of what it delivered (see ``expected``). ``replaces``: the
        write was a ``replace`` of this logical partition; other runs of it still in the table are
        duplicates, so the attempt is ``INCOMPLETE`` until the replace has deleted them. The status says what
        to do: wait (``NOT_VISIBLE_YET``, ``INCOMPLETE``, ``UNAVAILABLE``), or stop (``VERIFIED``;
        ``LOST`` and ``DUPLICATED``, to alert on; ``FAILED``; ``NOTHING_TO_VERIFY``: the caller decides
        whether no coverage is an empty write or a wrong table/source/partition).
        """
        from zerobus_orchestration.readback.judge import judge_once, outcome_of_error
        from zerobus_orchestration.readback.visibility import WaitPolicy

        try:
            name = TableName.parse(table).full_name
            expected_version = self.delta_version(name)
            expected = self.expected(name, source=source, partition=partition, ranges=ranges)
            endpoint = self.iceberg()
            probe = self._visibility_probe()
        except Exception as exc:  # judged, not swallowed: the outcome carries the type and the message
            return outcome_of_error(exc, table)
        outcome = judge_once(
            endpoint,
            name,
            expected.coverage,
            delta_version=expected_version if expected_version is not None else 0,
            probe=probe,
            policy=WaitPolicy.from_config(self.config.readback),
            explain_missing=self._explainer(name, expected.emitted_since),
            emitted_since=expected.emitted_since,
        )
        judged = _with_expected(outcome, expected)
        if replaces is None or source is None or judged.status is not ReadbackStatus.VERIFIED:
            return judged
        try:
            return self._superseded_check(judged, name, source, partition or "", replaces)
        except Exception as exc:  # judged, not swallowed
            return outcome_of_error(exc, table)

    def verify(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        ranges: Sequence[OffsetRange] | None = None,
        wait_s: float | None = None,
        force: bool | None = None,
        raise_errors: bool = False,
    ) -> ReadbackOutcome:
        """Wait (up to ``wait_s``, default the config's) for Iceberg to show what was delivered; judged.

        The CLI's verb: ``verify_once`` that waits out the Iceberg lag instead of returning at once.
        ``raise_errors``: an error that kept the scan from running propagates (the CLI maps its type to
        an exit code) instead of becoming a ``FAILED``/``NOTHING_TO_VERIFY`` outcome.
        """
        from zerobus_orchestration.readback import verify
        from zerobus_orchestration.readback.judge import outcome_of_error, outcome_of_report

        try:
            name = TableName.parse(table).full_name
            expected_version = self.delta_version(name)
            expected = self.expected(name, source=source, partition=partition, ranges=ranges)
            report = verify.verify_coverage(
                self.iceberg(),
                name,
                expected.coverage,
                probe=self._visibility_probe(),
                delta_version=expected_version if expected_version is not None else 0,
                policy=self._policy(wait_s),
                force=self.config.readback.force_metadata if force is None else force,
                explain_missing=self._explainer(name, expected.emitted_since),
                emitted_since=expected.emitted_since,
            )
        except Exception as exc:  # judged, not swallowed: the outcome carries the type and the message
            if raise_errors and not isinstance(exc, ReadbackTimeoutError):
                raise
            return outcome_of_error(exc, table)
        return _with_expected(outcome_of_report(report), expected)

    def _superseded_check(
        self, outcome: ReadbackOutcome, name: str, source: str, partition: str, replaces: str
    ) -> ReadbackOutcome:
        """A verified ``replace`` write whose partition still holds other runs' rows is not done."""
        reader = table_truth.reader_for(self.catalog, self.config, name)
        others = (
            {}
            if reader is None
            else table_truth.other_runs(reader, source=source, partition=partition, replace_key=replaces)
        )
        if not others:
            return outcome
        rows = sum(others.values())
        report = dict(outcome.report or {})
        report["duplicate_count"] = int(report.get("duplicate_count") or 0) + rows
        report["superseded_present"] = dict(others)
        return ReadbackOutcome(
            ReadbackStatus.INCOMPLETE,
            name,
            f"{name}: partition {replaces!r} was replaced by {partition!r}, but {rows} row(s) of the runs it "
            f"supersedes ({sorted(others)}) are still in the table: duplicates until the replace deletes "
            "them; re-run the write to finish the replace if this persists",
            report,
        )

    def read_rows(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        where: Mapping[str, Sequence[Any]] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows of ``table`` (optionally one source/partition) as Arrow, through Iceberg; ``where``
        (``{column: values}``) and ``columns`` are pushed down to the scan (``readback.rows``)."""
        from zerobus_orchestration.readback.rows import read_rows, scan_rows

        name = TableName.parse(table).full_name
        endpoint = self.iceberg()
        if source is None:
            return scan_rows(name, endpoint=endpoint, where=where, columns=columns)
        tag = source_tag(source, partition or "")
        return read_rows(name, source=tag, endpoint=endpoint, where=where, columns=columns)

    def close(self) -> None:
        """Close the coverage stores this service opened itself (``from_config``). Idempotent."""
        with self._lock:
            stores, self._owned = list(self._owned.values()), {}
            emulator, self._own_emulator = self._own_emulator, None
            self._find_emulator = False
        for store in stores:
            store.close()
        if emulator is not None:
            emulator.stop()  # a daemon's handle holds no lease: this stops only an in-process emulator

    # -- internals -------------------------------------------------------------------------------------

    def _emulator(self) -> EmulatorHandle | None:
        """The owner's emulator, or (standalone, embedded) the one found on first need."""
        if self.emulator is not None or not self._find_emulator:
            return self.emulator
        with self._lock:
            if self._own_emulator is None and self._find_emulator:
                from zerobus_orchestration.runtime import embedded

                self._own_emulator = embedded.readback_emulator(self.config)
            return self._own_emulator

    def _explainer(self, name: str, emitted_since: dt.datetime | None) -> MissingExplainer:
        """Which missing ranges are lost, from ``name``'s own Delta log (``coverage/absence.py``).

        Called only for ranges a scan lacks, so a verified read-back never reads the Delta table here.
        The same rule embedded, against ``zerobus-orch serve`` and in production: what the emulator
        acknowledged is not assumed committed (a service may commit late), only what Delta shows counts.
        """

        def explain(missing: Sequence[MissingRange], reflects: int) -> tuple[LostRange, ...]:
            reader = table_truth.reader_for(self.catalog, self.config, name)
            if reader is None:  # the table is gone since the scan: nothing to read it by
                return ()
            return self._lost(reader, missing, reflects, emitted_since)

        return explain

    def _lost(
        self,
        reader: table_truth.TableReader,
        missing: Sequence[MissingRange],
        reflects: int,
        emitted_since: dt.datetime | None,
        *,
        deleted_only: bool = False,
    ) -> tuple[LostRange, ...]:
        """``missing`` explained by the Delta log, as read-back's lost ranges (``deleted_only``: only the
        ones a row-removal commit took)."""
        from zerobus_orchestration.coverage import absence

        keys = {m.key.source: m.key for m in missing}  # a key's source is its ``_twg_source`` tag
        by_tag: dict[str, list[OffsetRange]] = {}
        for m in missing:
            by_tag.setdefault(m.key.source, []).append(m.span)
        found = absence.explain(
            reader, by_tag, reflects=reflects, emitted_since=emitted_since, margin_s=self._margin_s
        )
        lost: list[LostRange] = []
        for a in found:
            if a.cause is absence.Cause.DELETED:
                lost.append(LostRange(keys[a.tag], a.span, LostCause.DELETED, a.removed_at, a.operation))
            elif a.cause is absence.Cause.IN_DELTA and not deleted_only:
                lost.append(LostRange(keys[a.tag], a.span, LostCause.NOT_IN_ICEBERG))
        return tuple(lost)

    def _service_principal(self) -> DatabricksOAuthHeader:
        from zerobus_orchestration.readback.auth import DatabricksOAuthHeader

        with self._lock:
            if self._oauth is None:
                assert self.config.client_id is not None and self.config.client_secret is not None
                self._oauth = DatabricksOAuthHeader(
                    self.config.workspace_url or "", self.config.client_id, self.config.client_secret
                )
            return self._oauth

    def _policy(self, wait_s: float | None) -> WaitPolicy:
        from zerobus_orchestration.readback.visibility import WaitPolicy

        policy = WaitPolicy.from_config(self.config.readback)
        if wait_s is None:
            return policy
        return WaitPolicy(timeout_s=wait_s, initial_s=min(policy.initial_s, wait_s), max_s=policy.max_s)

    def _has_cache(self) -> bool:
        """The owner's stores, or a coverage file this host already has (never created by a verifier)."""
        return self._shared_coverage or Path(self.config.coverage_location).is_file()

    def _cached_keys(self, name: str, source: str) -> CachedKeys:
        """The keys of ``source``'s partition (None: of all its partitions) this host's cache holds, read
        when asked (``coverage.latest_run``): none without a cache, which a verifier never creates."""

        def keys(partition: str | None) -> Collection[CoverageKey]:
            if not self._has_cache():
                return ()
            return self.coverage_map(name, source=source, partition=partition)

        return keys

    def _emitted_since(self, name: str, keys: Iterable[CoverageKey]) -> dt.datetime | None:
        """The earliest any row of ``keys`` was stamped, as this host's cache knows it (less the margin);
        None unless it knows it for every key (read without creating a cache a verifier lacks)."""
        if not self._has_cache():
            return None
        store = self._coverage(name)
        seen = [store.first_seen(key) for key in keys]
        if not seen or any(first is None for first in seen):
            return None
        return emission_bound(None, min(first for first in seen if first is not None), self._margin_s)

    @property
    def _margin_s(self) -> float:
        return self.config.coverage.emit_margin_s

    def _expected_from_table(self, name: str, source: str, partition: str) -> Expected:
        """Delivered ranges read from the raw table's Delta log; positions it lacks are not durable."""
        reader = table_truth.reader_for(self.catalog, self.config, name)
        if reader is None:
            raise self._nothing(name, source, partition, "the table does not exist")
        rows = table_truth.delivered_rows(reader, source=source, partition=partition)
        delivered = table_truth.offsets_to_ranges(rows.offsets)
        earliest = (
            None if rows.first_emitted is None else emission_bound(rows.first_emitted, None, self._margin_s)
        )
        if not delivered:
            raise self._nothing(name, source, partition, "the table holds no row of it")
        key = CoverageKey(SINK_ID, source_tag(source, partition), partition)
        # Positions are counted from 0 within (source, partition): a hole is a row that never became
        # durable (a write that did not finish), not one Iceberg is still catching up with, unless a
        # row-removal commit took it after delivery (then it is lost).
        holes = tuple(MissingRange(key, h) for h in intervals.gaps_between(delivered, 0, delivered[-1].end))
        # Only a hole costs a look at the log (a verified read-back reads nothing more). Its version is read
        # after the rows: a hole's rows committed since are held there, not deleted, and stay not durable.
        deleted: tuple[LostRange, ...] = ()
        if holes:
            at = table_truth.table_version(reader)
            deleted = self._lost(reader, holes, at, earliest, deleted_only=True)
        taken = [lost.span for lost in deleted]
        not_durable = tuple(
            MissingRange(key, part)
            for hole in holes
            for part in intervals.gaps_between(taken, hole.span.start, hole.span.end)
        )
        return Expected(
            {key: delivered},
            ExpectedFrom.TABLE,
            not_durable=not_durable,
            deleted=deleted,
            emitted_since=earliest,
        )

    @staticmethod
    def _nothing(name: str, source: str | None, partition: str | None, why: str) -> NothingToVerifyError:
        scope = (
            ""
            if source is None
            else f" for source {source!r}" + ("" if partition is None else f" partition {partition!r}")
        )
        return NothingToVerifyError(
            f"read-back of {name}: nothing to verify{scope}: {why}; write first, or check the table, "
            "--source and --partition",
            table=name,
        )

    def _visibility_probe(self) -> VisibilityProbe | None:
        """How read-back learns which Delta version Iceberg reflects.

        Unity Catalog reports UniForm's ``converted_delta_version`` on the table (its Iceberg snapshots
        carry no Delta version); ``None`` selects the embedded mirror's snapshot-summary probe.
        """
        probe = getattr(self.catalog, "visibility_probe", None)
        return None if probe is None else probe()  # type: ignore[no-any-return]

    def _owned_store(self, table: str) -> CoverageStore:
        with self._lock:
            store = self._owned.get(table)
            if store is None:
                store = CoverageStore.from_config(self.config, table)
                self._owned[table] = store
            return store


def _with_expected(outcome: ReadbackOutcome, expected: Expected) -> ReadbackOutcome:
    """``outcome`` saying where its expected ranges came from; positions the table itself lacks make
    a verified scan ``INCOMPLETE`` (a write did not finish: resume it), listed as ``not_durable``, or
    ``LOST`` when a row-removal commit took them (``deleted``)."""
    if outcome.report is None:
        return outcome
    report: dict[str, Any] = dict(outcome.report)
    report["expected_from"] = expected.origin.value
    if expected.latest_run is not None:
        report["latest_run"] = expected.latest_run
    report["expected_rows"] = sum(len(span) for spans in expected.coverage.values() for span in spans)
    not_durable = [_range_dict(m.key, m.span) for m in expected.not_durable]
    report["not_durable_ranges"] = not_durable
    status, message = outcome.status, outcome.message
    if not_durable:
        rows = sum(len(m.span) for m in expected.not_durable)
        report["missing_ranges"] = [*report.get("missing_ranges", []), *not_durable]
        report["missing_rows"] = int(report.get("missing_rows", 0)) + rows
        report["verified"] = False
        if status in (ReadbackStatus.VERIFIED, ReadbackStatus.DUPLICATED):
            status = ReadbackStatus.INCOMPLETE
        message = (
            f"{outcome.table}: {rows} position(s) in {len(not_durable)} range(s) are not in the table's "
            "Delta log (not durable: a write did not finish; re-run it to resume); " + message
        )
    if expected.deleted:
        # Holes a row-removal commit made: lost, whatever the scan said of the rest.
        deleted = [lost.as_dict() for lost in expected.deleted]
        rows = sum(len(lost.span) for lost in expected.deleted)
        report["lost_ranges"] = [*report.get("lost_ranges", []), *deleted]
        report["lost_rows"] = int(report.get("lost_rows", 0)) + rows
        report["missing_ranges"] = [*report.get("missing_ranges", []), *deleted]
        report["missing_rows"] = int(report.get("missing_rows", 0)) + rows
        report["verified"] = False
        reflects = int(report.get("iceberg_delta_version") or 0)
        message = f"{lost_message(outcome.table, expected.deleted, reflects)}; {message}"
        status = ReadbackStatus.LOST
    return replace(outcome, status=status, message=message, report=report)


def _range_dict(key: CoverageKey, span: OffsetRange) -> dict[str, Any]:
    return {
        "sink": key.sink,
        "source": key.source,
        "partition": key.partition,
        "start": span.start,
        "end": span.end,
    }
