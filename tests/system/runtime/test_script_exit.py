"""A plain Python script that writes through the runtime exits on its own, as the README shows it.

The embedded default (an in-process emulator) serves the SDK's streams from gRPC worker threads that
block until the runtime closes the streams. Interpreter shutdown joins thread-pool workers in its own
early exit hook; the runtime registry's hook must run before that one, or the script hangs after its
last line. Airflow imports ``concurrent.futures`` early, which hid this; a script does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from zerobus_orchestration import acquire_runtime, load_config, release_runtime

    config = load_config(warehouse=sys.argv[1])
    assert config.emulator.mode == "in_process", config.emulator.mode  # the embedded default
    runtime = acquire_runtime(config)
    result = runtime.write("main.raw.exit_check", pa.table({"id": list(range(1000))}), source="script")
    print("written", result.rows_written, flush=True)
    release_runtime(config)
    """
)


def test_a_script_that_writes_exits_without_closing_anything_itself(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.pop("ZEROBUS_EMULATOR__MODE", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "warehouse")],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the script wrote and then hung at exit; its output: {exc.stdout!r}") from exc
    assert done.returncode == 0, done.stderr[-3000:]
    assert "written 1000" in done.stdout
