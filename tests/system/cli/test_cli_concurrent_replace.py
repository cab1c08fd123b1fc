"""Two ``zerobus-orch ingest --mode replace`` of one partition at once, 20 rounds, as separate processes:
on the embedded default (both on the warehouse's shared emulator daemon, ``local`` catalog) and against
``zerobus-orch serve`` (two hosts on the production configuration; the delete runs on the SQL warehouse).
Each setup's 20 rounds run as a few tests of consecutive rounds (``CHUNKS``), each on a warehouse (and
``serve``) of its own, so a parallel run spreads them over its workers instead of waiting minutes for
one test at its end.

Every round must end with exactly the newer run's rows (never an empty partition), the newer run exiting
0 having deleted the older, and the older exiting 1 naming the newer. Before the runs were ordered, each
replace deleted every other run of the partition: the partition ended empty in 4 of 9 such rounds, and
both commands exited 0.

The race is made real, not left to luck: the emulator delays every acknowledgement (``delay_acks``) by
longer than the two processes' start-up jitter, so each run's rows are visible in the table while the
other is still waiting for its acknowledgements. The test checks from the table's history that both runs'
rows were there at once, that both processes started before either finished, and which run is newer
(the first Delta version holding its rows; a tie goes to the greater tag). On a loaded machine one
process may start so late that the other has finished before its rows exist: then both exit 0 (the
runs were one after the other, and the later one replaced the earlier); the test accepts such a round
only when the table's history shows it, and requires at least half the rounds of each test to have raced.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.local_cloud import CLI, clean_env, production_env, run_cli, serve
from zerobus_orchestration.config import SHARED_EMULATOR_MODE, load_config
from zerobus_orchestration.emulator.advert import http_json
from zerobus_orchestration.emulator.launcher import connect_daemon
from zerobus_orchestration.tables import table_uri

# Each round is two processes' start-up plus the ack delay: 6 s (embedded, on a quiet machine), more on serve.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TABLE = "main.derived.daily"
ROUNDS = 20  # per setup, in CHUNKS tests of ROUNDS // CHUNKS consecutive rounds
CHUNKS = {"embedded": 2, "serve": 4}
ROWS = 2_000
# Longer than the two processes' start-up jitter: with 1.5 s, 4 test workers on 2 cores once left only 3
# and 4 of 10 rounds raced (one process started that much later); the wait costs wall time, not CPU.
ACK_DELAY_S = 3.0
SECRET = "concurrent-replace-test-secret"
DELAY_ACKS = {"kind": "delay_acks", "table": TABLE, "delay_s": ACK_DELAY_S, "streams": 10_000}


@dataclass(frozen=True)
class Run:
    ids: list[int]
    returncode: int
    summary: dict[str, object]
    stderr: str
    started: float
    ended: float


def _input(path: Path, ids: range) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    return str(path)


def _race(envs: tuple[dict[str, str], dict[str, str]], tmp_path: Path, key: str, n: int) -> list[Run]:
    """Both replaces of partition ``key`` started at once; waits for both."""
    ranges = [
        range(n * 100_000, n * 100_000 + ROWS),
        range(n * 100_000 + 50_000, n * 100_000 + 50_000 + ROWS),
    ]
    started: list[tuple[subprocess.Popen[str], float, range]] = []
    for env, ids, side in zip(envs, ranges, "ab", strict=True):
        data = _input(tmp_path / f"{key}-{side}.parquet", ids)
        command = [CLI, "ingest", "--table", TABLE, "--source", "daily", "--mode", "replace", "--role"]
        command += ["derived", "--partition", key, "--json", data]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append((proc, time.monotonic(), ids))
    runs = []
    for proc, start, ids in started:
        out, err = proc.communicate(timeout=240)
        runs.append(
            Run(
                list(ids),
                proc.returncode,
                json.loads(out) if out.strip() else {},
                err,
                start,
                time.monotonic(),
            )
        )
    return runs


def _tags_by_version(uri: str, since: int, prefix: str) -> dict[int, set[str]]:
    """The tags of ``prefix`` present at every version after ``since``, read by time travel."""
    latest = DeltaTable(uri).version()
    found: dict[int, set[str]] = {}
    for version in range(since + 1, latest + 1):
        tags = DeltaTable(uri, version=version).to_pyarrow_table(columns=["_twg_source"])["_twg_source"]
        found[version] = {t for t in tags.unique().to_pylist() if t.startswith(prefix)}
    return found


def _rows(uri: str, prefix: str) -> dict[str, list[int]]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["_twg_source", "id"])
    out: dict[str, list[int]] = {}
    for tag, row_id in zip(table["_twg_source"].to_pylist(), table["id"].to_pylist(), strict=True):
        if tag.startswith(prefix):
            out.setdefault(tag, []).append(row_id)
    return {tag: sorted(ids) for tag, ids in out.items()}


def _chunk(setup: str, chunk: int) -> range:
    """The rounds test ``chunk`` of ``setup`` runs; the chunks together are rounds 0 to ROUNDS - 1."""
    size = ROUNDS // CHUNKS[setup]
    return range(chunk * size, (chunk + 1) * size)


def test_the_chunks_run_every_round_once() -> None:
    for setup, chunks in CHUNKS.items():
        assert sorted(n for c in range(chunks) for n in _chunk(setup, c)) == list(range(ROUNDS)), setup


def _rounds(envs: tuple[dict[str, str], dict[str, str]], tmp_path: Path, uri: str, rounds: range) -> None:
    raced = 0
    for n in rounds:
        key = f"2026-01-{n + 1:02d}"
        prefix = f"daily[{key}@"
        before = DeltaTable(uri).version()
        began = time.monotonic()
        runs = _race(envs, tmp_path, key, n)
        print(f"round {n + 1}: {time.monotonic() - began:.1f} s, exits {[r.returncode for r in runs]}")
        raced += _check_round(runs, uri, before, prefix, f"round {n + 1}")
    # The ack delay makes nearly every round a race; a round can run one after the other only when one
    # process starts late on a loaded machine. At least half must have raced, or the test proved little.
    assert raced >= len(rounds) // 2, f"only {raced} of {len(rounds)} rounds raced"


def _check_round(runs: list[Run], uri: str, before: int, prefix: str, round_name: str) -> int:
    """Check one round's outcome from the table's history; 1 if the runs raced, 0 if one followed the other."""
    where = f"{round_name}: {[(r.returncode, r.summary, r.stderr[-600:]) for r in runs]}"
    assert all(r.summary.get("source_tag") for r in runs), where
    tags = [str(r.summary["source_tag"]) for r in runs]
    history = _tags_by_version(uri, before, prefix)
    # Which run is newer: the first Delta version holding its rows (a tie goes to the greater tag).
    born = {tag: min(v for v, present in history.items() if tag in present) for tag in tags}
    newer, older = sorted(runs, key=lambda r: (born[str(r.summary["source_tag"])], r.summary["source_tag"]))[
        ::-1
    ]
    won, lost = str(newer.summary["source_tag"]), str(older.summary["source_tag"])
    # Whatever the timing: the partition holds exactly the newer run's rows, never empty, never both,
    # and the newer run exited 0 having deleted the older.
    assert _rows(uri, prefix) == {won: newer.ids}, where
    assert newer.returncode == 0 and newer.summary["superseded_sources"] == [lost], where
    assert newer.summary["run_order_version"] == born[won], where
    assert any(present == {won, lost} for present in history.values()), f"{where}: never both in the table"
    if older.returncode == 0:
        # Only a run that finished before the newer one's rows existed may succeed: it replaced what was
        # there, and the newer run replaced it afterwards, as two runs one after the other do.
        assert born[won] > int(str(older.summary["delta_version"])), f"{where}: births {born}"
        return 0
    assert older.returncode == 1 and older.summary["status"] == "superseded", where
    assert older.summary["superseded_by"] == won, where
    assert f"superseded by the newer run {won!r}" in older.stderr, where
    # The race happened: both processes were running at once.
    assert max(r.started for r in runs) < min(r.ended for r in runs), where
    return 1


def _warm_up(env: dict[str, str], tmp_path: Path) -> None:
    """One write of another source: the table exists before the first round."""
    data = _input(tmp_path / "warm.parquet", range(3))
    done = run_cli(
        env, "ingest", "--table", TABLE, "--source", "warmup", "--role", "derived", data, timeout=240
    )
    assert done.returncode == 0, done.stderr


def _arm_daemon_fault(env: dict[str, str]) -> None:
    """Arm the ack delay on the warehouse's running daemon (it holds armed faults in memory)."""
    cfg = load_config(environ=env).with_default_emulator_mode(SHARED_EMULATOR_MODE)
    handle = connect_daemon(cfg, watch=False)
    status, body = http_json(
        handle.workspace_url + "/_emulator/faults",
        method="POST",
        body=json.dumps(DELAY_ACKS).encode(),
        authorization=f"Bearer {handle.access_token().get_secret_value()}",
    )
    assert status == 200, body


@pytest.mark.parametrize("chunk", range(CHUNKS["embedded"]))
def test_concurrent_replace_rounds_on_the_embedded_default_keep_the_newer_run(
    tmp_path: Path, chunk: int
) -> None:
    env = clean_env() | {
        "ZEROBUS_WAREHOUSE": str(tmp_path / "wh"),
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.1",
        "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.2",
        "ZEROBUS_EMULATOR__FAULTS_ENABLED": "true",
        "ZEROBUS_READBACK__POLL_INITIAL_S": "0.05",
    }
    _warm_up(env, tmp_path)  # starts the warehouse's daemon; then the delay is armed on it
    _arm_daemon_fault(env)
    _rounds((env, env), tmp_path, table_uri(str(tmp_path / "wh"), TABLE), _chunk("embedded", chunk))


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[dict[str, object]]:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([DELAY_ACKS]))
    env = clean_env() | {
        "ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET,
        "ZEROBUS_EMULATOR__TIME_TO_TABLE_S": "0.1",
    }
    with serve(str(tmp_path / "cloud"), env, "--faults", str(faults)) as info:
        yield info


@pytest.mark.parametrize("chunk", range(CHUNKS["serve"]))
def test_concurrent_replace_rounds_from_two_hosts_against_serve_keep_the_newer_run(
    tmp_path: Path, local_cloud: dict[str, object], chunk: int
) -> None:
    hosts = tuple(
        clean_env()
        | production_env(local_cloud, SECRET, tmp_path / name)
        | {"ZEROBUS_READBACK__POLL_INITIAL_S": "0.05"}
        for name in ("host_a", "host_b")
    )
    _warm_up(hosts[0], tmp_path)
    uri = table_uri(str(local_cloud["warehouse"]), TABLE)
    _rounds((hosts[0], hosts[1]), tmp_path, uri, _chunk("serve", chunk))
