"""Import weight of the write path: a process that only writes loads no read-back or emulator server code.

Every ``zerobus-orch ingest`` and every Dagster/Airflow process that writes imports the runtime. In
daemon mode (the entry points' default) or against a workspace it is a client: it never scans Iceberg
and never serves the emulator, so pyiceberg's REST catalog, pandas (pulled in by ``pyarrow.dataset``)
and the emulator's server modules are loaded only where read-back, table-truth reads or an in-process
emulator first need them. Each check runs in a fresh interpreter, like the packaging checks beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.daemon_helpers import kill_daemons, starts_logged

# What only read-back, table-truth reads or a serving emulator use; each costs 0.1-0.6 s to import.
HEAVY = (
    "pandas",
    "pyarrow.dataset",
    "pyiceberg.catalog.rest",
    "zerobus_orchestration.emulator.iceberg_rest",
    "zerobus_orchestration.emulator.server",
    "zerobus_orchestration.emulator.materializer",
    "zerobus_orchestration.emulator.daemon",
)


def _modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    script = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_write_path_modules_import_no_readback_or_server() -> None:
    loaded = _modules_after(
        "import zerobus_orchestration.runtime.registry\n"
        "import zerobus_orchestration.runtime.embedded\n"
        "import zerobus_orchestration.emulator.launcher  # daemon mode's client side"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "zerobus_orchestration.runtime.facade" in loaded  # the check ran against the write path itself


def test_cli_ingest_imports_no_readback_or_server_starting_the_daemon_or_using_it(tmp_path: Path) -> None:
    """Two real ``ingest`` commands (typer dispatch, files, runtime, a write through the warehouse's
    daemon), each into a new table in a fresh interpreter: the first starts the daemon (its hand-over,
    ``emulator.daemon_handoff``, is all a starter loads), the second uses the running one. A new source
    on an existing table would read the table's Delta log to resume (``pyarrow.dataset``): not done here."""
    data = tmp_path / "tiny.parquet"
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), data)
    warehouse = tmp_path / "wh"
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env.update(NO_PROXY="127.0.0.1,localhost", ZEROBUS_EMULATOR__TIME_TO_TABLE_S="0.2")

    def ingest(table: str) -> list[str]:
        return ["ingest", "--table", table, "--warehouse", str(warehouse), "--json", str(data)]

    try:
        starting = _modules_after(
            "from zerobus_orchestration.cli.main import app\n"
            f"app({ingest('main.raw.first')!r}, standalone_mode=False)  # raises on a failed write",
            env=env,
        )
        assert starts_logged(warehouse) == 1  # this write started the daemon
        loaded = _modules_after(
            "from zerobus_orchestration.cli.main import app\n"
            f"app({ingest('main.raw.events')!r}, standalone_mode=False)  # raises on a failed write",
            env=env,
        )
        assert starts_logged(warehouse) == 1  # the checked write used the running daemon
    finally:
        kill_daemons(warehouse)
    # pyarrow imports pandas itself on the first ``pa.array``/``pa.scalar`` built from Python values or
    # numpy (its pandas shim, pyarrow 26): the write path builds its arrays from buffers instead.
    for modules in (starting, loaded):
        assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
        # The write went through the daemon client, so the check covers that path, not an import error.
        assert {"zerobus_orchestration.runtime.facade", "zerobus_orchestration.emulator.launcher"} <= modules


def test_decimal_text_with_nulls_and_wide_values_imports_no_pandas() -> None:
    """The sink's decimal text (``wire_values.decimal_text``: 64-bit values built from their integers,
    wider ones through Arrow's cast) reads a null column's validity without ``to_numpy``, which would
    import pandas into every writing process."""
    loaded = _modules_after(
        "import numpy as np, pyarrow as pa\n"
        "from zerobus_orchestration.wire_values import decimal_text\n"
        "words = np.array([150, 0, -225, -1, 0, 0, 5, 0, 0, 1], np.int64)  # the last is 2**64: wide\n"
        "valid = np.packbits(np.array([1, 0, 1, 1, 1], bool), bitorder='little')\n"
        "column = pa.Array.from_buffers(\n"
        "    pa.decimal128(38, 2), 5, [pa.py_buffer(valid), pa.py_buffer(words)], null_count=1\n"
        ")\n"
        "text = decimal_text(column.slice(1)).to_pylist()\n"
        "assert text == [None, '0.00', '0.05', '184467440737095516.16'], text"
    )
    assert "pandas" not in loaded
