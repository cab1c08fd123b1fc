"""Read-back as a read-only service: delivered coverage checked against what Iceberg serves.

``ReadbackService`` needs catalog read access (the live Delta version, Unity Catalog's UniForm probe),
the coverage stores and the Iceberg REST endpoint; no stream pool and no transport. In embedded mode
the Iceberg endpoint is the emulator's, so it also holds the emulator handle (its URL, a token, and
"commit the write-ahead log now" for the version that holds every acknowledged row). The runtime
builds one over its own catalog and coverage and delegates its read-back verbs to it;
``ReadbackService.from_config`` builds a standalone one (sensors and triggers that only verify).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.catalog.commands import catalog_from_config
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import CoverageStore, source_tag
from zerobus_orchestration.errors import NothingToVerifyError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.endpoint import IcebergEndpoint
from zerobus_orchestration.readback.judge import outcome_of_error, verify_readback_once
from zerobus_orchestration.readback.rows import read_rows
from zerobus_orchestration.readback.status import ReadbackOutcome
from zerobus_orchestration.readback.verify import ReadbackReport, verify_readback
from zerobus_orchestration.readback.visibility import VisibilityProbe, WaitPolicy
from zerobus_orchestration.tables import TableName

if TYPE_CHECKING:
    from zerobus_orchestration.embedded import EmulatorHandle

CoverageOf = Callable[[str], CoverageStore]
"""A table's full name -> its coverage store."""

UC_ICEBERG_REST_PATH = "/api/2.1/unity-catalog/iceberg-rest"


class ReadbackService:
    """Verify and read back the rows of delivered tables; never writes a row."""

    def __init__(
        self,
        config: ZerobusConfig,
        *,
        catalog: TableCatalog,
        coverage: CoverageOf | None = None,
        emulator: EmulatorHandle | None = None,
    ) -> None:
        """``coverage``: the owner's stores (the runtime's); ``None`` opens this service's own."""
        self.config = config
        self.catalog = catalog
        self.emulator = emulator  # the embedded Iceberg endpoint; None once its owner stopped it
        self._owned: dict[str, CoverageStore] = {}
        self._lock = threading.Lock()
        self._coverage: CoverageOf = coverage if coverage is not None else self._owned_store

    @classmethod
    def from_config(cls, config: ZerobusConfig, *, emulator: EmulatorHandle | None = None) -> ReadbackService:
        """A standalone service with its own catalog client and coverage stores (``close`` it)."""
        return cls(config, catalog=catalog_from_config(config), emulator=emulator)

    # -- what was delivered, and which Delta version holds it ------------------------------------------

    def delta_version(self, table: str) -> int | None:
        """The Delta version that holds everything acknowledged so far (embedded), else the live one.

        Embedded: the emulator commits its write-ahead log now, so the version returned contains every
        acknowledged row. Production: Zerobus commits asynchronously (time to table, P50 <= 5 s), so
        the version read from the catalog is a lower bound.
        """
        name = TableName.parse(table).full_name
        if self.catalog.describe(name) is None:
            return None
        if self.emulator is not None:
            version = self.emulator.materialize_now(name)
            if version is not None:
                return int(version)
        # Nothing was left to commit: the emulator's own materialiser got there first. Read the
        # version after that, not before, or a concurrent commit would be missed.
        state = self.catalog.describe(name)
        return None if state is None else state.version

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
        default_uri = None if self.emulator is None else self.emulator.iceberg_rest_uri
        if default_uri is None and self.config.workspace_url:
            default_uri = self.config.workspace_url.rstrip("/") + UC_ICEBERG_REST_PATH
        endpoint = IcebergEndpoint.from_config(self.config.readback, default_uri=default_uri)
        if self.emulator is not None and endpoint.token is None and endpoint.uri == default_uri:
            # The emulator's Iceberg REST facade requires a credential, like Unity Catalog's.
            token = self.emulator.access_token()
            endpoint = IcebergEndpoint(uri=endpoint.uri, token=token, properties=endpoint.properties)
        return endpoint

    def verify_readback(
        self,
        table: str,
        *,
        source: str | None = None,
        partition: str | None = None,
        wait_s: float | None = None,
        force: bool | None = None,
    ) -> ReadbackReport:
        """Wait for Iceberg to reflect what was delivered, then verify coverage against the scan."""
        name = TableName.parse(table).full_name
        cfg = self.config.readback
        policy = WaitPolicy.from_config(cfg)
        if wait_s is not None:
            policy = WaitPolicy(timeout_s=wait_s, initial_s=min(policy.initial_s, wait_s), max_s=policy.max_s)
        coverage = self._coverage_to_verify(name, source, partition)
        expected = self.delta_version(name)
        return verify_readback(
            self.iceberg(),
            name,
            coverage,
            probe=self._visibility_probe(),
            delta_version=expected if expected is not None else 0,
            policy=policy,
            force=cfg.force_metadata if force is None else force,
        )

    def verify_readback_once(
        self, table: str, *, source: str | None = None, partition: str | None = None
    ) -> ReadbackOutcome:
        """One non-blocking, judged attempt (sensors, triggers): never raises for a read-back failure.

        The status says what to do: wait (``NOT_VISIBLE_YET``, ``INCOMPLETE``, ``UNAVAILABLE``), or stop
        (``VERIFIED``, ``FAILED``, ``NOTHING_TO_VERIFY``: the caller decides whether no coverage is an
        empty write or a wrong table/source/partition).
        """
        try:
            name = TableName.parse(table).full_name
            coverage = self._coverage_to_verify(name, source, partition)
            expected = self.delta_version(name)
            endpoint = self.iceberg()
            probe = self._visibility_probe()
        except Exception as exc:  # judged, not swallowed: the outcome carries the type and the message
            return outcome_of_error(exc, table)
        return verify_readback_once(
            endpoint,
            name,
            coverage,
            delta_version=expected if expected is not None else 0,
            probe=probe,
            policy=WaitPolicy.from_config(self.config.readback),
        )

    def read_rows(self, table: str, *, source: str | None = None, partition: str | None = None) -> pa.Table:
        """Rows of ``table`` (optionally one source/partition) as Arrow, through Iceberg."""
        name = TableName.parse(table).full_name
        endpoint = self.iceberg()
        if source is None:
            return endpoint.load_table(name).scan().to_arrow()
        return read_rows(name, source=source_tag(source, partition or ""), endpoint=endpoint)

    def close(self) -> None:
        """Close the coverage stores this service opened itself (``from_config``). Idempotent."""
        with self._lock:
            stores, self._owned = list(self._owned.values()), {}
        for store in stores:
            store.close()

    # -- internals -------------------------------------------------------------------------------------

    def _coverage_to_verify(
        self, name: str, source: str | None, partition: str | None
    ) -> dict[CoverageKey, tuple[OffsetRange, ...]]:
        coverage = self.coverage_map(name, source=source, partition=partition)
        if not coverage:
            scope = (
                ""
                if source is None
                else f" for source {source!r}" + ("" if partition is None else f" partition {partition!r}")
            )
            raise NothingToVerifyError(
                f"read-back of {name}: no delivered coverage{scope}, so there is nothing to verify yet; "
                "write first, or check the table, --source and --partition",
                table=name,
            )
        return coverage

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
