"""The snapshot-summary keys are defined once, for the mirror that writes and the probe that reads."""

from __future__ import annotations

from zerobus_orchestration import snapshot_summary
from zerobus_orchestration.emulator import uniform
from zerobus_orchestration.readback import visibility


def test_writer_and_reader_use_the_one_definition() -> None:
    assert snapshot_summary.DELTA_VERSION_KEY == "delta-version"
    # The very objects, not equal copies: each module imports the name instead of spelling the key.
    assert vars(uniform)["DELTA_VERSION_KEY"] is snapshot_summary.DELTA_VERSION_KEY
    assert vars(uniform)["DELTA_TIMESTAMP_KEY"] is snapshot_summary.DELTA_TIMESTAMP_KEY
    assert vars(visibility)["DELTA_VERSION_KEY"] is snapshot_summary.DELTA_VERSION_KEY
