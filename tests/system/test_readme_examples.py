"""The README's examples run as written: the Python one as a script in a fresh folder (the embedded
default), the Dagster one materialised with its job, the Airflow one with ``dag.test()``, its landing
folder (an absolute path in the README) moved into the test's temporary folder and filled with a file.

Each example is taken from README.md itself, so an edit there that breaks it fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.airflow_env import xcom

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated")


def readme_example(marker: str) -> str:
    """The one ```python block of README.md that contains ``marker``."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.DOTALL | re.MULTILINE)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"README.md: expected one python example with {marker!r}, found {len(found)}"
    return found[0]


def run_script(code: str, folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by this venv's Python in ``folder``, with none of the caller's ZEROBUS_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZEROBUS_") and not k.endswith("_proxy")}
    clean |= {"NO_PROXY": "127.0.0.1,localhost", **env}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=clean, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_the_python_example_writes_and_verifies(tmp_path: Path) -> None:
    done = run_script(readme_example("acquire_runtime"), tmp_path)
    assert done.stdout.splitlines()[-1] == "3 True"
    assert (tmp_path / ".zerobus" / "warehouse" / "main" / "raw" / "events").is_dir(), "the embedded default"


# After the README's code: run the job it defines, then read the table the way a user would.
DAGSTER_RUN = """
from zerobus_orchestration import acquire_runtime, load_config

result = defs.resolve_job_def("zerobus_job").execute_in_process()
assert result.success
runtime = acquire_runtime(load_config())
assert runtime.verify("main.raw.events", source="raw/events").verified
print(runtime.read_rows("main.raw.events").num_rows)
"""


def test_the_dagster_example_materialises(tmp_path: Path) -> None:
    # In process, so no shared emulator daemon outlives the test (the resource's default is one).
    done = run_script(
        readme_example("dagster_defs") + DAGSTER_RUN, tmp_path, ZEROBUS_EMULATOR__MODE="in_process"
    )
    assert done.stdout.splitlines()[-1] == "3"


def test_the_airflow_example_ingests_and_verifies(register_dag: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    code = readme_example("airflow_provider")
    assert '"/landing/' in code, "the test moves the README's landing folder"
    namespace: dict[str, Any] = {}
    exec(compile(code.replace('"/landing/', f'"{landing}/'), "README.md", "exec"), namespace)
    dag = namespace["ingest"].dag
    day = landing / "events" / "2026-11-30"
    day.mkdir(parents=True)
    pq.write_table(
        pa.table({"event_id": [1, 2, 3], "kind": ["open", "click", "close"]}), day / "part-0.parquet"
    )
    register_dag(dag)

    run = dag.test(logical_date=datetime(2026, 11, 30, tzinfo=UTC))

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"ingest": "success", "readback": "success"}
    ingest = xcom(dag.dag_id, run.run_id, "ingest")
    assert ingest["rows_written"] == 3 and ingest["table"] == "main.raw.events"
    # A run of the logical date's partition (docs/adr/0007-write-modes.md), as the README's readback line says.
    assert ingest["source"] == "events_to_delta/ingest"
    assert ingest["partition"] == f"2026-11-30/-1@{run.run_id}"
