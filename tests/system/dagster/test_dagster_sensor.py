"""The read-back sensor across the Iceberg lag: skip (cursor unchanged) -> verified -> nothing new; recovery;
an empty materialisation (nothing to verify) moves the cursor instead of blocking it."""

import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable

from dagster_defs import ZerobusIOManager, ZerobusResource, build_readback_sensor, build_zerobus_definitions
from dagster_defs.naming import RESUME_PARTITION_TAG, RESUME_SOURCE_TAG
from dagster_defs.sensors import RECOVERY_TAG, ReadbackCursor
from tests.support.dagster_support import fast_config
from zerobus_orchestration.tables import table_uri

CLICKS_KEY = dg.AssetKey(["raw", "clicks"])
LAG_S = 1.5  # long enough that the first tick right after the durable write sees nothing in Iceberg


@dg.asset(key=CLICKS_KEY)
def clicks() -> pa.Table:
    return pa.table({"click_id": pa.array(range(300), pa.int64())})


EMPTY_KEY = dg.AssetKey(["raw", "no_clicks"])


@dg.asset(key=EMPTY_KEY)
def no_clicks() -> pa.Table:
    return pa.table({"click_id": pa.array([], pa.int64())})


def _tick(
    sensor: dg.SensorDefinition, instance: dg.DagsterInstance, zerobus: ZerobusResource, cursor: str | None
) -> dg.SensorResult | dg.SkipReason:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"zerobus": zerobus}) as ctx:
        outcome = sensor(ctx)
    assert isinstance(outcome, dg.SensorResult | dg.SkipReason)
    return outcome


def _setup(tmp_path: Path) -> tuple[ZerobusResource, dg.DagsterInstance, dg.ExecuteInProcessResult]:
    zerobus = ZerobusResource.from_config(fast_config(tmp_path / "warehouse", iceberg_lag_s=LAG_S))
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [clicks],
        resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)},
        instance=instance,
    )
    assert result.success
    return zerobus, instance, result


def test_sensor_skips_while_iceberg_lags_then_reports_verified(tmp_path: Path) -> None:
    zerobus, instance, result = _setup(tmp_path)
    sensor = build_readback_sensor([CLICKS_KEY], check_name="iceberg_readback", max_lag_s=600)

    first = _tick(sensor, instance, zerobus, None)
    assert isinstance(first, dg.SkipReason), "Iceberg cannot show the rows before its lag has passed"
    assert "raw/clicks" in (first.skip_message or "") and "not visible" in (first.skip_message or "")

    cursor: str | None = None
    verified: dg.SensorResult | None = None
    ticks = 1
    deadline = time.monotonic() + 30
    while verified is None and time.monotonic() < deadline:
        time.sleep(0.2)
        outcome = _tick(sensor, instance, zerobus, cursor)
        ticks += 1
        if isinstance(outcome, dg.SensorResult) and outcome.asset_events:
            verified = outcome
        else:
            assert isinstance(outcome, dg.SkipReason), "while lagging the cursor must not move"
    assert verified is not None, f"not verified after {ticks} ticks"

    observation, evaluation = verified.asset_events
    assert isinstance(observation, dg.AssetObservation) and observation.asset_key == CLICKS_KEY
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["readback/verified"] is True
    assert meta["readback/rows_scanned"] == 300
    assert meta["readback/missing_rows"] == 0
    assert meta["zerobus/partition"] == f"@{result.run_id}"
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and evaluation.passed
    assert evaluation.check_name == "iceberg_readback"
    assert not verified.run_requests

    stored = ReadbackCursor.parse(verified.cursor)
    record = instance.fetch_materializations(CLICKS_KEY, limit=1).records[0]
    assert stored.of("raw/clicks").verified == record.storage_id

    after = _tick(sensor, instance, zerobus, verified.cursor)
    assert isinstance(after, dg.SkipReason) and "no new" in (after.skip_message or "")


def test_sensor_requests_one_recovery_run_when_lag_exceeds_the_limit(tmp_path: Path) -> None:
    zerobus, instance, _ = _setup(tmp_path)
    sensor = build_readback_sensor([CLICKS_KEY], max_lag_s=0.0)

    first = _tick(sensor, instance, zerobus, None)
    assert isinstance(first, dg.SensorResult)
    assert not first.asset_events
    (request,) = first.run_requests or []
    record = instance.fetch_materializations(CLICKS_KEY, limit=1).records[0]
    assert request.run_key == f"zerobus-readback-recovery:raw/clicks:{record.storage_id}"
    assert request.tags[RECOVERY_TAG] == "true"
    assert request.asset_selection == [CLICKS_KEY]
    state = ReadbackCursor.parse(first.cursor).of("raw/clicks")
    assert state.verified == -1, "recovery does not count as verified"
    assert state.recovery == record.storage_id

    second = _tick(sensor, instance, zerobus, first.cursor)
    assert isinstance(second, dg.SkipReason), "one recovery request per materialisation"


def test_recovery_run_resumes_the_original_coverage_instead_of_appending(tmp_path: Path) -> None:
    zerobus, instance, original = _setup(tmp_path)
    sensor = build_readback_sensor([CLICKS_KEY], max_lag_s=0.0)
    first = _tick(sensor, instance, zerobus, None)
    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests or []
    assert request.tags[RESUME_SOURCE_TAG] == "raw/clicks"
    assert request.tags[RESUME_PARTITION_TAG] == f"@{original.run_id}"

    # Launch the recovery run as the daemon would: a new run (new run id) carrying the request's tags.
    recovery = dg.materialize(
        [clicks],
        resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)},
        instance=instance,
        tags=request.tags,
    )
    assert recovery.success and recovery.run_id != original.run_id
    meta = {
        k: v.value for k, v in recovery.asset_materializations_for_node("raw__clicks")[0].metadata.items()
    }
    assert meta["zerobus/partition"] == f"@{original.run_id}", "the recovery must reuse the original key"
    assert (meta["zerobus/rows_written"], meta["zerobus/rows_skipped"]) == (0, 300)
    report = zerobus.runtime.verify("main.raw.clicks", source="raw/clicks")
    assert report.verified and report.rows_scanned == 300 and report.duplicate_count == 0


def test_empty_materialisation_moves_the_cursor_with_a_zero_row_observation(tmp_path: Path) -> None:
    zerobus = ZerobusResource.from_config(fast_config(tmp_path / "warehouse", iceberg_lag_s=LAG_S))
    instance = dg.DagsterInstance.ephemeral()
    resources = {"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)}
    assert dg.materialize([no_clicks], resources=resources, instance=instance).success
    # max_lag_s=0: an empty write must not look like a lagging one (no recovery run either).
    sensor = build_readback_sensor([EMPTY_KEY], check_name="iceberg_readback", max_lag_s=0.0)

    first = _tick(sensor, instance, zerobus, None)
    assert isinstance(first, dg.SensorResult), f"an empty write must not block the sensor: {first}"
    assert not first.run_requests
    observation, evaluation = first.asset_events
    assert isinstance(observation, dg.AssetObservation) and observation.asset_key == EMPTY_KEY
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["readback/nothing_to_verify"] is True and meta["readback/verified"] is True
    assert meta["readback/rows_scanned"] == 0
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and evaluation.passed
    record = instance.fetch_materializations(EMPTY_KEY, limit=1).records[0]
    assert ReadbackCursor.parse(first.cursor).of("raw/no_clicks").verified == record.storage_id

    after = _tick(sensor, instance, zerobus, first.cursor)
    assert isinstance(after, dg.SkipReason) and "no new" in (after.skip_message or "")


def test_readback_check_passes_for_an_empty_write(tmp_path: Path) -> None:
    zerobus = ZerobusResource.from_config(fast_config(tmp_path / "warehouse"))
    defs = build_zerobus_definitions(assets=[no_clicks], resource=zerobus, readback_checks=True)
    result = defs.resolve_job_def("zerobus_job").execute_in_process(instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.passed, evaluation.description
    assert "0 rows" in (evaluation.description or "")


def test_readback_check_in_a_job_waits_for_iceberg_and_passes(tmp_path: Path) -> None:
    zerobus = ZerobusResource.from_config(fast_config(tmp_path / "warehouse"))
    defs = build_zerobus_definitions(assets=[clicks], resource=zerobus, readback_checks=True)
    job = defs.resolve_job_def("zerobus_job")
    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == "iceberg_readback" and evaluation.passed
    assert evaluation.metadata["readback/rows_scanned"].value == 300
    sensor = defs.resolve_sensor_def("zerobus_readback")
    assert sensor.asset_selection is not None


def test_covered_rows_not_visible_wait_until_max_lag_then_fail_the_check(tmp_path: Path) -> None:
    """Zerobus commits acknowledged rows asynchronously: delivered rows missing from the snapshot that
    the Delta log shows in no version are not committed yet, so they are waited for (cursor unchanged, no
    recovery) until ``max_lag_s``, then judged as a failed check, never lost.

    What was delivered is the materialisation's own record (its ``zerobus/*`` offsets), not a coverage
    file of the verifying host: a record claiming 10 rows beyond the 300 written stands for them."""
    zerobus, instance, _ = _setup(tmp_path)
    assert zerobus.runtime.verify("main.raw.clicks", source="raw/clicks").verified  # past the lag
    written = instance.fetch_materializations(CLICKS_KEY, limit=1).records[0]
    assert written.asset_materialization is not None
    claimed = {k: v.value for k, v in written.asset_materialization.metadata.items()}
    claimed.update({"zerobus/offset_end": 310, "zerobus/rows_written": 310})  # 10 never committed
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=CLICKS_KEY,
            metadata={k: v for k, v in claimed.items() if k.startswith("zerobus/")},
        )
    )
    start = ReadbackCursor()
    start.of("raw/clicks").verified = written.storage_id  # judge the claiming record only
    cursor = start.dumps()

    patient = build_readback_sensor([CLICKS_KEY], check_name="iceberg_readback", max_lag_s=600)
    waiting = _tick(patient, instance, zerobus, cursor)
    assert isinstance(waiting, dg.SkipReason), "missing rows may still be committing: wait"
    assert "10 delivered row(s)" in (waiting.skip_message or "")

    impatient = build_readback_sensor([CLICKS_KEY], check_name="iceberg_readback", max_lag_s=0.0)
    judged = _tick(impatient, instance, zerobus, cursor)
    assert isinstance(judged, dg.SensorResult) and not judged.run_requests
    observation, evaluation = judged.asset_events
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and not evaluation.passed
    assert "LOST" not in (evaluation.description or "")
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["readback/verified"] is False and meta["readback/missing_rows"] == 10
    assert meta["readback/lost_rows"] == 0
    record = instance.fetch_materializations(CLICKS_KEY, limit=1).records[0]
    assert ReadbackCursor.parse(judged.cursor).of("raw/clicks").verified == record.storage_id


def test_rows_deleted_after_the_write_fail_the_check_at_once(tmp_path: Path) -> None:
    """Rows deleted from the table after they were delivered are lost, not late: the check fails on the
    first tick whose snapshot shows the delete, even with a ``max_lag_s`` of ten minutes (the sensor
    used to wait it out), naming the rows and the commit that removed them, with no recovery run."""
    zerobus, instance, _ = _setup(tmp_path)
    assert zerobus.runtime.verify("main.raw.clicks", source="raw/clicks").verified
    uri = table_uri(zerobus.runtime.config.warehouse, "main.raw.clicks")
    DeltaTable(uri).delete("_twg_offset >= 100 AND _twg_offset < 110")
    deleted_at = DeltaTable(uri).version()

    patient = build_readback_sensor([CLICKS_KEY], check_name="iceberg_readback", max_lag_s=600)
    deadline = time.monotonic() + 30
    judged = _tick(patient, instance, zerobus, None)
    while isinstance(judged, dg.SkipReason) and time.monotonic() < deadline:
        assert "not visible" in (judged.skip_message or ""), judged.skip_message  # only the Iceberg lag
        time.sleep(0.2)
        judged = _tick(patient, instance, zerobus, None)
    assert isinstance(judged, dg.SensorResult) and not judged.run_requests, judged
    observation, evaluation = judged.asset_events
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and not evaluation.passed
    description = evaluation.description or ""
    assert "LOST" in description and "100..109" in description
    assert f"deleted by Delta version {deleted_at} (DELETE)" in description
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["readback/verified"] is False and meta["readback/lost_rows"] == 10
