"""The typed read-back verdict: which statuses end a wait, and a JSON round trip through a trigger event."""

from __future__ import annotations

import json

import pytest

from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus

REPORT = {
    "table": "main.raw.t",
    "verified": False,
    "rows_scanned": 7,
    "missing_ranges": [
        {"sink": "s", "source": "a", "partition": "p", "start": 3, "end": 5},
        {"sink": "s", "source": "a", "partition": "p", "start": 9, "end": 10},
    ],
    "missing_rows": 3,
    "duplicate_count": 2,
}


@pytest.mark.parametrize(
    ("status", "terminal", "successful"),
    [
        (ReadbackStatus.NOT_VISIBLE_YET, False, False),
        (ReadbackStatus.INCOMPLETE, False, False),
        (ReadbackStatus.UNAVAILABLE, False, False),
        (ReadbackStatus.VERIFIED, True, True),
        (ReadbackStatus.NOTHING_TO_VERIFY, True, False),
        (ReadbackStatus.FAILED, True, False),
        (ReadbackStatus.LOST, True, False),
        (ReadbackStatus.DUPLICATED, True, False),
    ],
)
def test_terminal_and_successful(status: ReadbackStatus, terminal: bool, successful: bool) -> None:
    assert status.is_terminal is terminal
    assert status.is_successful is successful
    assert ReadbackOutcome(status, "t", "m").is_terminal is terminal


def test_every_status_is_covered_by_the_table_above() -> None:
    assert len(ReadbackStatus) == 8


@pytest.mark.parametrize("report", [None, REPORT])
@pytest.mark.parametrize("status", list(ReadbackStatus))
def test_json_round_trip_is_lossless(status: ReadbackStatus, report: dict[str, object] | None) -> None:
    outcome = ReadbackOutcome(status, "main.raw.t", "main.raw.t: something", report)
    wire = json.loads(json.dumps(outcome.to_json()))  # what an Airflow trigger event carries
    assert ReadbackOutcome.from_json(wire) == outcome


def test_missing_ranges_and_duplicates_come_from_the_report() -> None:
    outcome = ReadbackOutcome(ReadbackStatus.INCOMPLETE, "main.raw.t", "m", REPORT)
    assert [(m["start"], m["end"]) for m in outcome.missing_ranges] == [(3, 5), (9, 10)]
    assert outcome.missing_rows == 3 and outcome.duplicate_count == 2
    bare = ReadbackOutcome(ReadbackStatus.NOT_VISIBLE_YET, "main.raw.t", "m")
    assert bare.missing_ranges == [] and bare.missing_rows == 0 and bare.duplicate_count == 0


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'pending'"):
        ReadbackOutcome.from_json({"status": "pending", "table": "t", "message": "m"})


def test_the_status_module_imports_nothing_heavy() -> None:
    """Airflow DAG files and the triggerer import it to read events back: no pyarrow, no pyiceberg."""
    import subprocess
    import sys

    code = (
        "import sys, json\nimport zerobus_orchestration.readback.status\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    assert not {"pyarrow", "pyiceberg", "deltalake", "dagster", "grpc"} & loaded
