"""State files 0600 in 0700 folders in production mode too: ``zerobus-orch serve`` (the local cloud) and
workers on the production path (remote endpoint, OAuth M2M, ``catalog.backend=unity``).

Before, the embedded mode alone made its state folder owner-only; ``serve`` and production workers left
their state folders 0755 and ``coverage.sqlite``, ``resume_marks.sqlite`` and ``iceberg.sqlite`` 0644
(and the write-ahead log's segments 0644 in every mode). SQLite's ``-wal`` and ``-shm`` side files count:
they are stat'ed while a worker holds its databases open.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.local_cloud import clean_env, production_env, run_cli, serve
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.runtime.facade import ZerobusRuntime

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # serve and a worker CLI in their own processes

TABLE = "main.perm.events"


def not_owner_only(root: Path) -> list[str]:
    """Every folder and file under ``root`` (itself included) with a group or other permission bit."""
    found = []
    for path in [root, *sorted(root.rglob("*"))]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{oct(mode)} {path}")
    return found


def test_every_state_file_of_a_production_run_is_owner_only(
    tmp_path: Path, isolated_databricks_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1_000), pa.int64())}), data)
    served_state = tmp_path / "cloud" / "_zerobus"
    with serve(str(tmp_path / "cloud"), clean_env()) as info:  # no secret configured: the warehouse's own
        secret = Path(str(info["client_secret_file"])).read_text().strip()
        worker = clean_env() | production_env(info, secret, tmp_path / "host_a")
        for command in (
            ["ingest", "--table", TABLE, "--source", "a", str(data), "--json"],
            ["readback", "--table", TABLE, "--source", "a", "--json"],
        ):
            done = run_cli(worker, *command)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)

        for name in [n for n in os.environ if "proxy" in n.lower()]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        config = ZerobusConfig.model_validate(
            {
                "endpoint": info["endpoint"],
                "workspace_url": info["workspace_url"],
                "client_id": info["client_id"],
                "client_secret": secret,
                "catalog": {"backend": "unity", "sql_warehouse_id": info["sql_warehouse_id"]},
                "state_dir": str(tmp_path / "host_b" / "state"),
                "warehouse": str(tmp_path / "host_b" / "warehouse"),
            }
        )
        runtime = ZerobusRuntime(config)  # a worker in this process: its databases stay open
        try:
            runtime.write(TABLE, pa.table({"id": pa.array(range(100), pa.int64())}), source="b")
            held = sorted(p.name for p in (tmp_path / "host_b" / "state").iterdir())
            assert {"coverage.sqlite-wal", "coverage.sqlite-shm"} <= set(held), held  # they count
            assert not_owner_only(tmp_path / "host_b" / "state") == []
            assert not_owner_only(served_state) == []  # while serve holds its WAL and catalogs open
        finally:
            runtime.close()

    for state in (served_state, tmp_path / "host_a" / "state", tmp_path / "host_b" / "state"):
        assert not_owner_only(state) == [], state
    assert (served_state / "iceberg.sqlite").exists() and any((served_state / "wal").rglob("*.wal"))
    assert (tmp_path / "host_a" / "state" / "coverage.sqlite").exists()
