"""The emulator as its own process (``python -m zerobus_orchestration.emulator``, what ``zerobus-orch serve``
runs), for tests that kill it: its stdout's first line is the JSON of its endpoints, to which
``client_secret`` is added, read from the ``client_secret_file`` it names (the warehouse's own secret)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def emulator_process(
    warehouse: Path, tmp: Path, *extra: str
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    stderr = open(tmp / f"emulator-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zerobus_orchestration.emulator",
            "--warehouse",
            str(warehouse),
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"emulator did not start: {Path(stderr.name).read_text()}"
        info = json.loads(line)
        info["client_secret"] = Path(info["client_secret_file"]).read_text().strip()
        yield proc, info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        stderr.close()
