"""``cli/process_exit.leave``: the console script's exit keeps every orderly step of a normal exit (threads
joined, exit hooks run, streams flushed, the status) and skips only interpreter finalization.

Each case runs a small program in its own interpreter, since ``leave`` ends the process it runs in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROGRAM = """
import atexit, sys, threading, time, weakref
from pathlib import Path
from zerobus_orchestration.cli.process_exit import leave

out = Path(sys.argv[1])

def late_worker():
    time.sleep(0.3)  # still running when leave() is called: it must be joined, not cut off
    (out / "thread").write_text("joined")

class Guarded:
    pass

guarded = Guarded()
weakref.finalize(guarded, lambda: (out / "finalizer").write_text("ran"))
atexit.register(lambda: (out / "atexit").write_text("ran"))
threading._register_atexit(lambda: (out / "early").write_text("ran"))
threading.Thread(target=late_worker).start()

# The way a finalization would show: a module-level object's __del__ runs at interpreter teardown.
# Its path and ``open`` are bound now: at teardown the module's globals may be gone already.
class Teardown:
    def __del__(self, path=str(out / "teardown"), opener=open):
        with opener(path, "w") as f:
            f.write("ran")

teardown = Teardown()
sys.stdout.write("printed without a newline")  # a pipe is block-buffered: only a flush gets it out
leave(eval(sys.argv[2]))
"""


def _leave(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path), code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_leave_runs_every_orderly_exit_step_and_keeps_the_status(tmp_path: Path) -> None:
    done = _leave(tmp_path, "3")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed without a newline"
    for step in ("thread", "early", "atexit", "finalizer"):
        assert (tmp_path / step).exists(), f"{step} did not run before the process ended"
    assert (tmp_path / "thread").read_text() == "joined"


def test_leave_skips_interpreter_finalization(tmp_path: Path) -> None:
    done = _leave(tmp_path, "0")
    assert done.returncode == 0, done.stderr
    # The same program ended by sys.exit would run the module object's __del__ at teardown: shown below,
    # so this test fails if leave() ever falls back to a normal exit.
    assert not (tmp_path / "teardown").exists()
    normal = tmp_path / "normal"
    normal.mkdir()
    script = normal / "program.py"
    script.write_text(textwrap.dedent(PROGRAM).replace("leave(eval(sys.argv[2]))", "sys.exit(0)"))
    ran = subprocess.run(
        [sys.executable, str(script), str(normal), "0"], capture_output=True, timeout=60, check=False
    )
    assert ran.returncode == 0 and (normal / "teardown").exists()


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [("None", 0, ""), ("2", 2, ""), ("'error: the table is gone'", 1, "error: the table is gone\n")],
)
def test_leave_gives_the_status_system_exit_gives(
    tmp_path: Path, code: str, status: int, stderr: str
) -> None:
    done = _leave(tmp_path, code)
    assert (done.returncode, done.stderr) == (status, stderr)
