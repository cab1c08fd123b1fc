"""Failure edges through Dagster (``dg.materialize``, the real executor): each ends in a named step failure
within 15 s, and an asset's ``RetryPolicy`` retries only what a retry can fix.

The same edges through the Python API: tests/system/runtime/test_runtime_reachability.py and
tests/system/runtime/test_failure_edges.py; through Airflow: tests/system/airflow/test_airflow_failure_edges.py.
"""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from dagster_defs import ZerobusIOManager, ZerobusResource
from tests.support.daemon_helpers import kill_daemons
from tests.support.dagster_support import fast_config
from tests.support.failure_edges import (
    WRONG_SECRET,
    DaemonKiller,
    TableFailer,
    remote_settings,
    silent_endpoint,
)
from zerobus_orchestration.config import EmulatorConfig, SdkStreamOptions
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration  # the official SDK against the emulator, through the IO manager


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(str(tmp_path / "cloud"), EmulatorConfig(), iceberg=False) as emu:
        yield emu


@dg.asset(key=["raw", "edge_orders"], retry_policy=dg.RetryPolicy(max_retries=1))
def edge_orders() -> pa.Table:
    return pa.table({"order_id": pa.array(range(10), pa.int64())})


def remote_resources(settings: dict[str, Any]) -> dict[str, Any]:
    resource = ZerobusResource(
        endpoint=settings["endpoint"],
        workspace_url=settings["workspace_url"],
        client_id=settings["client_id"],
        client_secret=settings["client_secret"],
        warehouse=settings["warehouse"],
        use_environment=False,
        options={"state_dir": settings["state_dir"]},
    )
    return {"zerobus": resource, "io_manager": ZerobusIOManager(zerobus=resource, catalog="main")}


_STARTS = {
    dg.DagsterEventType.RESOURCE_INIT_STARTED,
    dg.DagsterEventType.STEP_START,
    dg.DagsterEventType.STEP_RESTARTED,
}
_FAILS = {
    dg.DagsterEventType.RESOURCE_INIT_FAILURE,
    dg.DagsterEventType.STEP_UP_FOR_RETRY,
    dg.DagsterEventType.STEP_FAILURE,
}


@dg.asset(key=["raw", "edge_events"], retry_policy=dg.RetryPolicy(max_retries=1))
def edge_events() -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(2_000):
            yield pa.record_batch({"id": pa.array(range(i * 1_000, (i + 1) * 1_000), pa.int64())})
            time.sleep(0.02)

    return pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]), batches())


Attempt = tuple[str, float, float]  # error with causes, seconds the attempt ran, when it failed (time.time())


def materialize(
    resources: dict[str, Any], asset: dg.AssetsDefinition = edge_orders
) -> tuple[dg.ExecuteInProcessResult, list[Attempt]]:
    """Run ``asset``; with every failed attempt: its error with causes, the seconds from the attempt's
    start (resource init or step start) to its failure event, and when that was, as the event log
    stamped them."""
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([asset], resources=resources, instance=instance, raise_on_error=False)
    attempts: list[Attempt] = []
    started = None
    for entry in instance.all_logs(result.run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type in _STARTS and started is None:
            started = entry.timestamp
        elif event.event_type in _FAILS:
            assert started is not None
            error = _messages(event.event_specific_data.error)  # type: ignore[union-attr]
            attempts.append((error, entry.timestamp - started, entry.timestamp))
            started = None
    return result, attempts


def _messages(error: Any) -> str:
    """An error's message (led by its class), then its causes' (a resource's failure is wrapped by
    Dagster's own)."""
    texts = []
    while error is not None:
        texts.append(error.message.strip())
        error = error.cause
    return " <- ".join(texts)


def test_a_wrong_client_secret_fails_the_step_once_naming_the_client_id(
    tmp_path: Path, emulator: Emulator
) -> None:
    """HTTP 401 ``invalid_client``: not retried by the asset's RetryPolicy (a non-retriable Failure)."""
    settings = remote_settings(emulator, tmp_path / "state", tmp_path / "worker", client_secret=WRONG_SECRET)

    result, attempts = materialize(remote_resources(settings))

    assert not result.success
    ((message, ran, _),) = attempts  # one attempt: the asset's max_retries=1 unused
    # A Failure that allows no retry, caused by the credentials error (before: EndpointUnreachableError).
    assert message.startswith("dagster._core.definitions.events.Failure: OAuth token request"), message
    assert "<- zerobus_orchestration.errors.CredentialsRefusedError: " in message
    assert f"for client ID {emulator.client_id!r} refused: HTTP 401 (invalid_client" in message
    assert WRONG_SECRET not in message
    assert ran < 15.0


def test_an_endpoint_that_never_answers_fails_each_attempt_within_15_s_naming_url_and_setting(
    tmp_path: Path, emulator: Emulator
) -> None:
    """Accepts TCP, never answers: each attempt fails after ``connect_timeout_s`` (10 s by default) naming
    the URL and the setting, and the RetryPolicy retries it (the endpoint may answer later)."""
    with silent_endpoint() as endpoint:
        settings = remote_settings(emulator, tmp_path / "state", tmp_path / "worker", endpoint=endpoint)
        result, attempts = materialize(remote_resources(settings))

    assert not result.success
    assert len(attempts) == 2  # the first attempt and its one retry
    for message, ran, _ in attempts:
        assert (
            f"Zerobus endpoint {endpoint} (zerobus.endpoint (ZEROBUS_ENDPOINT)) accepted a connection but did "
            "not answer a gRPC request within 10 s"
        ) in message
        assert ran < 15.0


def test_a_table_failed_mid_write_fails_the_step_once_with_the_table_s_failure(tmp_path: Path) -> None:
    """The emulator fails the table mid-write (a NOT NULL column added behind its back): the step fails
    with the table's failure within 15 s, and the RetryPolicy does not retry it (no retry can help
    until the table is repaired). Before: 38-81 s, then a pool or retry-budget message."""
    config = fast_config(tmp_path / "wh").model_copy(update={"sdk": SdkStreamOptions()})  # SDK defaults
    resource = ZerobusResource.from_config(config)
    failer = TableFailer(tmp_path / "wh", "main.raw.edge_events")

    result, attempts = materialize(
        {"zerobus": resource, "io_manager": ZerobusIOManager(zerobus=resource, catalog="main")}, edge_events
    )
    failer.join()

    assert failer.altered_wall is not None, "the table was never altered: the fault did not act"
    assert not result.success
    ((message, _, failed_at),) = attempts  # one attempt: the asset's max_retries=1 unused
    failure = (
        "dagster._core.definitions.events.Failure: table main.raw.edge_events is failed in the emulator ("
    )
    assert message.startswith(failure), message
    assert "<- zerobus_orchestration.errors.TableUnavailableError: " in message
    assert failed_at - failer.altered_wall < 15.0


@pytest.mark.slow  # the shared emulator daemon SIGKILLed mid-write
def test_a_daemon_killed_mid_write_without_a_successor_fails_the_step_once_naming_it(tmp_path: Path) -> None:
    """The resource's default, a shared emulator daemon: SIGKILLed mid-write while another emulator holds
    the warehouse, so no successor starts. The step fails within 15 s saying the daemon exited, with its
    pid and log, and the RetryPolicy does not retry it (the log says what to fix). Before: "the token
    endpoint refused the client credentials" or a pool timeout."""
    warehouse = tmp_path / "wh"
    config = fast_config(warehouse, mode="daemon").model_copy(update={"sdk": SdkStreamOptions()})
    resource = ZerobusResource.from_config(config)
    killer = DaemonKiller(warehouse, "main.raw.edge_events")
    try:
        result, attempts = materialize(
            {"zerobus": resource, "io_manager": ZerobusIOManager(zerobus=resource, catalog="main")},
            edge_events,
        )
    finally:
        killer.release()
        kill_daemons(warehouse)

    assert killer.killed is not None and killer.taken_wall is not None, "the fault did not act"
    assert not result.success
    ((message, _, failed_at),) = attempts  # one attempt: the asset's max_retries=1 unused
    died = f"dagster._core.definitions.events.Failure: the emulator daemon exited (pid {killer.killed}, "
    assert message.startswith(died), message
    assert "<- zerobus_orchestration.errors.EmulatorExitedError: " in message
    assert failed_at - killer.taken_wall < 15.0
