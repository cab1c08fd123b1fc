"""A re-run of a logical partition from another host, started before the service committed the first run's
rows to the table (docs/adr/0007-write-modes.md, "Rows still on their way").

Real parts: one emulator serving the warehouse over the network and committing on its own every
``time_to_table_s`` (as Zerobus does, a few seconds after acknowledging), two runtimes with their own
state dirs (each its own coverage cache and catalog registry: two hosts sharing only the lakehouse).
Host A writes partition ``d1`` as run ``r1`` and returns once its rows are acknowledged; host B writes
``d1`` as run ``r2`` at once. B's look at the table finds none of A's rows yet: without waiting for the
table to settle it wrote its own copy of the partition (primary raw under ``auto``: twice the rows).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.config import EmulatorConfig, Role, ZerobusConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import RerunRefusedError
from zerobus_orchestration.reserved import SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import TEST_SDK_OPTIONS

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # each case waits out the service's commit

RAW = "main.raw.events"
TIME_TO_TABLE_S = 1.5  # under the default 2 s settle period of a table that shows no commit rhythm yet
ROWS = 2_000


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"day": ["d1"] * n, "v": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Emulator]:
    """One Zerobus endpoint both hosts reach over the network, committing on its own (like Zerobus)."""
    emulator = Emulator(
        str(tmp_path / "wh"),
        EmulatorConfig(time_to_table_s=TIME_TO_TABLE_S, iceberg_lag_s=0.0),
        iceberg=False,
    ).start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def hosts(tmp_path: Path, service: Emulator) -> Iterator[tuple[ZerobusRuntime, ZerobusRuntime]]:
    def host(name: str) -> ZerobusRuntime:
        settings: dict[str, Any] = {
            "endpoint": service.endpoint,
            "workspace_url": service.workspace_url,
            "client_id": service.client_id,
            "client_secret": service.client_secret,
            "warehouse": str(tmp_path / "wh"),
            "state_dir": str(tmp_path / name),
            "sdk": TEST_SDK_OPTIONS.model_dump(),
        }
        return ZerobusRuntime(ZerobusConfig.model_validate(settings))

    a, b = host("host-a"), host("host-b")
    try:
        yield a, b
    finally:
        b.close()
        a.close()


def by_tag(service: Emulator, tmp_path: Path) -> dict[str, list[int]]:
    """``v`` per ``_twg_source`` in the Delta table, once the service committed all it acknowledged."""
    service.materialize_now(RAW)
    data = DeltaTable(table_uri(str(tmp_path / "wh"), RAW)).to_pyarrow_table(columns=[SOURCE, "v"])
    out: dict[str, list[int]] = {}
    for tag, value in zip(data[SOURCE].to_pylist(), data["v"].to_pylist(), strict=True):
        out.setdefault(tag, []).append(value)
    return {tag: sorted(values) for tag, values in out.items()}


def write(runtime: ZerobusRuntime, data: pa.Table, run: str) -> Any:
    return runtime.write(RAW, data, source="events", partition=f"d1@{run}", role=Role.PRIMARY_RAW)


def not_yet_visible(tmp_path: Path) -> int:
    """Rows of the table's latest version (no commit forced): what host B's first look would find."""
    return int(DeltaTable(table_uri(str(tmp_path / "wh"), RAW)).to_pyarrow_table(columns=[SOURCE]).num_rows)


@pytest.fixture
def host_b(tmp_path: Path, hosts: tuple[ZerobusRuntime, ZerobusRuntime]) -> ZerobusRuntime:
    """Host B, just after host A wrote run r1 of ``d1`` (acknowledged, not in the table yet)."""
    a, b = hosts
    assert write(a, rows(ROWS), "r1").rows_written == ROWS
    assert not_yet_visible(tmp_path) == 0, "A's rows must still be on their way (the fault acts)"
    return b


def test_a_rerun_with_the_same_content_on_another_host_sends_nothing(
    tmp_path: Path, service: Emulator, host_b: ZerobusRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="zerobus_orchestration.runtime.lifecycle"):
        again = write(host_b, rows(ROWS), "r2")

    assert again.already_delivered and again.delivered_by == "events[d1@r1]", caplog.text
    assert again.rows_written == 0
    assert by_tag(service, tmp_path) == {"events[d1@r1]": list(range(ROWS))}, "no second copy"


def test_a_rerun_that_extends_the_first_on_another_host_sends_only_the_rest(
    tmp_path: Path, service: Emulator, host_b: ZerobusRuntime
) -> None:
    extended = write(host_b, rows(ROWS + 500), "r2")

    assert (extended.rows_written, extended.rows_skipped) == (500, ROWS)
    assert extended.source_tag == "events[d1@r1]", "written as the run it extends"
    assert by_tag(service, tmp_path) == {"events[d1@r1]": list(range(ROWS + 500))}


def test_a_rerun_with_other_content_on_another_host_is_refused(
    tmp_path: Path, service: Emulator, host_b: ZerobusRuntime
) -> None:
    with pytest.raises(RerunRefusedError) as refused:
        write(host_b, rows(ROWS, start=7), "r2")

    assert refused.value.existing == "events[d1@r1]"
    assert by_tag(service, tmp_path) == {"events[d1@r1]": list(range(ROWS))}, "nothing of B's was sent"


def quiet_for(tmp_path: Path, seconds: float) -> None:
    """Until nobody wrote the table for ``seconds`` (by its newest commit's timestamp)."""
    newest = DeltaTable(table_uri(str(tmp_path / "wh"), RAW)).history(limit=1)[0]["timestamp"] / 1000.0
    time.sleep(max(0.0, newest + seconds - time.time()))


def test_a_rerun_on_the_same_host_of_a_short_run_on_a_quiet_table_sends_nothing(
    tmp_path: Path,
    service: Emulator,
    hosts: tuple[ZerobusRuntime, ZerobusRuntime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The table's log shows nothing of r1 (no commit since long before it): this host's coverage does.
    The first write of the partition, on that quiet table, waits for nothing."""
    a, _ = hosts
    a.write(RAW, rows(10), source="events", partition="d0@r0", role=Role.PRIMARY_RAW)
    service.materialize_now(RAW)
    quiet_for(tmp_path, 2.5)  # past the 2 s settle period: nothing can be on its way

    with caplog.at_level(logging.INFO, logger="zerobus_orchestration.runtime.settled_runs"):
        write(a, rows(ROWS), "r1")
        assert "waited" not in caplog.text, "a fresh partition on a quiet table waits for nothing"
        assert not_yet_visible(tmp_path) == 10, "r1's rows must still be on their way (the fault acts)"
        again = write(a, rows(ROWS), "r2")

    assert again.already_delivered and again.delivered_by == "events[d1@r1]", caplog.text
    assert "waited" in caplog.text
    assert by_tag(service, tmp_path) == {"events[d0@r0]": list(range(10)), "events[d1@r1]": list(range(ROWS))}
