"""`zerobus-orch` failures end with one line `error: <cause>` on stderr: exit 2 for bad input, 1 otherwise.

One bad-input case per command runs the installed console script in a subprocess (what a user or a
scheduler sees); the others run its entry point in this process (``tests.support.console_script``: the
same code, no interpreter start). The generic wrapper is also checked on a command registered after the
fact, as a later command would be.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from tests.support.console_script import Finished, run_console_script
from zerobus_orchestration.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, OneLineErrorsTyper, one_line
from zerobus_orchestration.errors import ConfigError

SCRIPT = Path(sys.executable).with_name("zerobus-orch")
CANARY = "canary-secret-9d41e7"


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    clean = {k: v for k, v in clean.items() if not k.startswith("ZEROBUS_")}
    clean.update(NO_PROXY="127.0.0.1,localhost", **env)
    return subprocess.run(
        [str(SCRIPT), *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=120
    )


def _in_process(*args: str, cwd: Path, **env: str) -> Finished:
    del cwd  # every path in these cases is absolute
    return run_console_script(*args, env=env)


def _one_error_line(done: subprocess.CompletedProcess[str] | Finished) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert done.stdout == "", done.stdout
    return lines[0]


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), tmp_path / "good.parquet")
    (tmp_path / "not-a-folder").write_text("a file where the warehouse should be")
    (tmp_path / "unknown-key.toml").write_text(
        f'[zerobus]\nwarehouse_path = "/tmp/x"\nclient_secret = "{CANARY}"\nclinet_secret = "{CANARY}"\n'
    )
    return tmp_path


@pytest.mark.parametrize(
    ("args", "code", "cause", "runner"),
    [
        (
            ["ingest", "--table", "main.raw.t", "--warehouse", "{tmp}/wh", "{tmp}/missing.parquet"],
            EXIT_BAD_INPUT,
            "missing.parquet",
            _run,
        ),
        (
            ["ingest", "--table", "main.raw.a.b", "--warehouse", "{tmp}/wh", "{tmp}/good.parquet"],
            EXIT_BAD_INPUT,
            "main.raw.a.b",
            _in_process,
        ),
        (
            ["check", "--table", "main.raw.t", "--config", "{tmp}/unknown-key.toml"],
            EXIT_BAD_INPUT,
            "zerobus.warehouse_path",
            _run,
        ),
        (
            ["readback", "--table", "main.raw.t", "--warehouse", "{tmp}/not-a-folder"],
            EXIT_BAD_INPUT,
            "NotADirectoryError",
            _run,
        ),
        (
            ["ingest", "--table", "main.raw.t", "--no-such-option"],
            EXIT_BAD_INPUT,
            "--no-such-option",
            _in_process,
        ),
        (
            ["readback", "--table", "main.raw.t", "--warehouse", "{tmp}/empty-wh", "--wait", "0.2"],
            EXIT_FAILURE,
            "nothing to verify",
            _in_process,
        ),
    ],
    ids=[
        "missing-file",
        "bad-table-name",
        "unknown-config-key",
        "warehouse-is-a-file",
        "usage",
        "no-coverage",
    ],
)
def test_console_script_failures_end_in_one_line(
    inputs: Path,
    args: list[str],
    code: int,
    cause: str,
    runner: Callable[..., subprocess.CompletedProcess[str] | Finished],
) -> None:
    done = runner(*(a.replace("{tmp}", str(inputs)) for a in args), cwd=inputs)
    line = _one_error_line(done)
    assert done.returncode == code, done.stderr
    assert cause in line
    assert CANARY not in line


def test_debug_flag_or_variable_adds_the_traceback(inputs: Path) -> None:
    args = ["readback", "--table", "main.raw.t", "--warehouse", str(inputs / "not-a-folder")]
    flagged = _run("--debug", *args, cwd=inputs)
    assert flagged.returncode == EXIT_BAD_INPUT
    assert "Traceback" in flagged.stderr and flagged.stderr.splitlines()[-1].startswith("error: ")
    # ZEROBUS_DEBUG is not a setting: the config loader must not refuse it as an unknown key.
    variable = _in_process(*args, cwd=inputs, ZEROBUS_DEBUG="1")
    assert variable.returncode == EXIT_BAD_INPUT
    assert "Traceback" in variable.stderr and "NotADirectoryError" in variable.stderr.splitlines()[-1]


def test_a_command_added_later_is_covered_too() -> None:
    app = OneLineErrorsTyper(pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """A group, as the real app is."""

    @app.command()
    def crash(kind: str) -> None:
        if kind == "bug":
            raise RuntimeError("something broke\nacross lines")
        if kind == "input":
            raise ConfigError("zerobus.pool.min_streams: must be >= 1")
        raise typer.Exit(3)  # a command's own exit status passes through unchanged

    runner = CliRunner()
    bug = runner.invoke(app, ["crash", "bug"])
    assert bug.exit_code == EXIT_FAILURE
    assert bug.stderr == "error: RuntimeError: something broke; across lines\n"
    bad = runner.invoke(app, ["crash", "input"])
    assert bad.exit_code == EXIT_BAD_INPUT
    assert bad.stderr == "error: zerobus.pool.min_streams: must be >= 1\n"
    assert runner.invoke(app, ["crash", "other"]).exit_code == 3


def test_foreign_error_text_never_carries_a_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZEROBUS_CLIENT_SECRET", CANARY)
    line = one_line(OSError(f"cannot open https://user:{CANARY}@example.com"))
    assert CANARY not in line and line.startswith("OSError: ")
