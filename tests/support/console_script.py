"""``zerobus-orch`` run in the test process the way its console script runs it: the app inside
``cli.errors.run``, which puts usage errors on one line too, the exit status from ``SystemExit``. Only the
last step of ``cli.main.main`` is left out: ``cli/process_exit.leave``, which would end this process.

For the argument and exit-status cases of the CLI tests: the same code as the installed script without
an interpreter start (about a second of CPU each). Each command keeps one subprocess test of the
installed script, which shows the two agree.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from typer.testing import CliRunner

from zerobus_orchestration.cli.errors import run
from zerobus_orchestration.cli.main import app
from zerobus_orchestration.cli.process_exit import status_of


@dataclass(frozen=True)
class Finished:
    """What a subprocess run would give: the exit status and the two streams as text."""

    returncode: int
    stdout: str
    stderr: str


def run_console_script(*args: str, env: Mapping[str, str | None] | None = None) -> Finished:
    """``zerobus-orch *args`` in this process; ``env`` sets (or, with None, removes) variables meanwhile."""
    argv = sys.argv
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        sys.argv = ["zerobus-orch", *args]
        try:
            run(app)
            status = 0
        except SystemExit as exc:
            status = status_of(exc.code)  # the installed script's own reading of the exit code
        finally:
            sys.argv = argv
            sys.stdout.flush()  # the script's streams are flushed at exit; these are buffered too
            sys.stderr.flush()
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    return Finished(status, out, err)
