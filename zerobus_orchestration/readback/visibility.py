"""Waiting for Iceberg visibility: which Delta version the Iceberg side of a table reflects.

Iceberg visibility lags the Delta commit (Zerobus time-to-table plus the asynchronous UniForm
conversion), so read-back first waits until the Iceberg side reflects at least the Delta version the
writer observed. It polls a ``VisibilityProbe`` with exponential backoff up to a deadline and never
sleeps a fixed time: locally the probe reads the snapshot summary's ``delta-version``; in production the
caller passes a probe reading Unity Catalog's ``converted_delta_version``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration.config import ReadbackConfig
from zerobus_orchestration.errors import ConfigError, ReadbackTimeoutError
from zerobus_orchestration.readback.endpoint import IcebergEndpoint
from zerobus_orchestration.retry import Backoff, poll_until
from zerobus_orchestration.snapshot_summary import DELTA_VERSION_KEY
from zerobus_orchestration.tables import TableName


class VisibilityProbe(Protocol):
    """Which Delta version the Iceberg side of ``table`` reflects; ``None`` while it is not visible."""

    def converted_delta_version(self, table: str) -> int | None: ...


class SnapshotSummaryProbe:
    """The embedded probe: ``delta-version`` in the current snapshot summary, read through REST."""

    def __init__(self, endpoint: IcebergEndpoint) -> None:
        self._endpoint = endpoint
        self._catalogs: dict[str, Catalog] = {}

    def converted_delta_version(self, table: str) -> int | None:
        name = TableName.parse(table)
        catalog = self._catalogs.get(name.catalog)
        if catalog is None:
            catalog = self._catalogs[name.catalog] = self._endpoint.catalog(name.catalog)
        try:
            loaded = catalog.load_table((name.schema, name.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None  # not mirrored yet: "not visible", not an error
        return summary_delta_version(loaded)


@dataclass(frozen=True)
class CallableProbe:
    """Adapts a plain callable, e.g. one reading UC's ``delta_uniform_iceberg.converted_delta_version``."""

    fn: Callable[[str], int | None]

    def converted_delta_version(self, table: str) -> int | None:
        return self.fn(table)


def summary_delta_version(table: IcebergTable) -> int | None:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    raw = snapshot.summary.additional_properties.get(DELTA_VERSION_KEY)
    return int(raw) if raw is not None else None


@dataclass(frozen=True)
class WaitPolicy:
    """Deadline and exponential backoff for waiting on Iceberg visibility."""

    timeout_s: float = 120.0
    initial_s: float = 0.2
    max_s: float = 5.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.initial_s <= 0 or self.max_s < self.initial_s:
            raise ConfigError(
                f"invalid read-back wait policy {self}: need timeout_s > 0 and 0 < initial_s <= max_s"
            )

    @classmethod
    def from_config(cls, config: ReadbackConfig) -> WaitPolicy:
        return cls(
            timeout_s=config.wait_timeout_s,
            initial_s=config.poll_initial_s,
            max_s=max(config.poll_max_s, config.poll_initial_s),
        )

    @property
    def backoff(self) -> Backoff:
        """Doubling from ``initial_s`` up to ``max_s``: the delays between polls."""
        return Backoff(initial_s=self.initial_s, max_s=self.max_s)


DEFAULT_WAIT: Final = WaitPolicy()


@dataclass(frozen=True)
class Visibility:
    delta_version: int
    waited_s: float
    polls: int


def wait_for_delta_version(
    probe: VisibilityProbe, table: str, min_version: int, policy: WaitPolicy = WaitPolicy()
) -> Visibility:
    """Poll ``probe`` with exponential backoff until it reports ``>= min_version``.

    Raises ``ReadbackTimeoutError`` at the deadline, naming the table, the version waited for and the
    version last seen.
    """
    start = time.monotonic()
    seen: list[int | None] = []  # every version the probe reported, for the timeout message

    def reached() -> int | None:
        version = probe.converted_delta_version(table)
        seen.append(version)
        return version if version is not None and version >= min_version else None

    visible = poll_until(reached, timeout_s=policy.timeout_s, backoff=policy.backoff)
    if visible is None:
        last = seen[-1]
        shown = "the table is not visible in Iceberg yet" if last is None else f"Delta version {last}"
        raise ReadbackTimeoutError(
            f"read-back of {table}: Iceberg metadata did not reach Delta version {min_version} within "
            f"{policy.timeout_s:g}s (last seen: {shown}); raise zerobus.readback.wait_timeout_s, or "
            "check the UniForm conversion (converted_delta_version) / the emulator's Iceberg mirror",
            table=table,
            delta_version=min_version,
        )
    return Visibility(delta_version=visible, waited_s=time.monotonic() - start, polls=len(seen))
