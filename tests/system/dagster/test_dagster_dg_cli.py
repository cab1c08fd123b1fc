"""The README's ``dg`` commands, run as a user runs them: the ``dg`` the ``dagster`` extra installs, in a
fresh process, on the quickstart and on a ``dg`` project declaring a table in YAML."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DG = Path(sys.executable).parent / "dg"
ROWS = 2_000


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        {
            "DAGSTER_HOME": str(home),
            "ZEROBUS_WAREHOUSE": str(tmp_path / "warehouse"),
            "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "0.3",
            "ZEROBUS_EMULATOR__MODE": "in_process",  # the run's process owns the emulator and then exits
            "QUICKSTART_ORDERS_ROWS": str(ROWS),
            **extra,
        }
    )
    return env


def _dg(args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert DG.exists(), (
        f"{DG} is missing: the dagster extra installs dagster-dg-cli (pip install -e '.[dagster]')"
    )
    done = subprocess.run([str(DG), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"dg {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return done


def _log(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def test_the_dagster_extra_installs_dg() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.replace(" ", "").startswith("dagster-dg-cli>=1.13,<1.14") for r in extras["dagster"])
    assert DG.exists(), f"{DG} is missing: reinstall with the dagster extra"


@pytest.mark.slow
def test_readme_dg_launch_runs_one_asset_then_the_quickstart_job(tmp_path: Path) -> None:
    env = _env(tmp_path)
    # One asset without its contract in the run: the table is still created from the contract.
    alone = _log(
        _dg(["launch", "-m", "dagster_defs.quickstart", "--assets", "raw/orders"], cwd=tmp_path, env=env)
    )
    assert "RUN_SUCCESS" in alone and 'Started execution of step "raw__orders"' in alone, alone[-3000:]
    assert 'Started execution of step "raw__orders__contract' not in alone, "only the asset may run"
    assert "reconciled from the contract raw/orders__contract" in alone, alone[-3000:]

    config = json.dumps({"ops": {"raw__orders": {"config": {"rows": ROWS}}}})
    job = _log(
        _dg(
            ["launch", "-m", "dagster_defs.quickstart", "--job", "zerobus_job", "--config-json", config],
            cwd=tmp_path,
            env=env,
        )
    )
    assert "RUN_SUCCESS" in job, job[-3000:]
    assert "Asset check 'deletion_vectors_disabled' on 'raw/orders__contract' passed" in job
    # What each step did, from the run's own record in DAGSTER_HOME (not the interleaved log lines of
    # the step processes, which a loaded machine may flush after the launcher's output ends).
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (latest,) = instance.get_run_records(limit=1)
        assert latest.dagster_run.job_name == "zerobus_job"
        stats = instance.get_run_step_stats(latest.dagster_run.run_id)
    steps = {s.step_key: s.status.value if s.status else None for s in stats}
    assert steps.get("raw__orders") == "SUCCESS", steps
    assert steps.get("analytics__daily_order_totals") == "SUCCESS", steps


PROJECT_TOML = """\
[project]
name = "shop"
version = "0.0.1"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "shop"
"""

DEFINITIONS = """\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""

RESOURCES = """\
import dagster as dg

from dagster_defs import ZerobusIOManager, ZerobusResource


@dg.definitions
def resources() -> dg.Definitions:
    zerobus = ZerobusResource()
    return dg.Definitions(resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)})
"""


@pytest.mark.slow
def test_readme_dg_scaffold_and_list_in_a_project(tmp_path: Path) -> None:
    """The layout ``create-dagster project`` makes, then the README's component commands."""
    project = tmp_path / "shop"
    defs = project / "src" / "shop" / "defs"
    defs.mkdir(parents=True)
    (project / "pyproject.toml").write_text(PROJECT_TOML)
    (project / "src" / "shop" / "__init__.py").write_text("")
    (project / "src" / "shop" / "definitions.py").write_text(DEFINITIONS)
    (defs / "__init__.py").write_text("")
    (defs / "resources.py").write_text(RESOURCES)
    env = _env(tmp_path, PYTHONPATH=str(project / "src"))

    _dg(
        ["scaffold", "defs", "dagster_defs.ZerobusTableComponent", "events", "--asset-key", "raw/events"],
        cwd=project,
        env=env,
    )
    assert "type: dagster_defs.ZerobusTableComponent" in (defs / "events" / "defs.yaml").read_text()

    listed = json.loads(_dg(["list", "defs", "--json"], cwd=project, env=env).stdout)
    assets = {a["asset_key"]: a for a in listed["assets"]}
    assert set(assets) == {"raw/events__contract"}, assets
    assert set(assets["raw/events__contract"]["kinds"]) == {"databricks", "delta"}
    assert {c["name"] for c in listed["asset_checks"]} >= {"registered", "iceberg_reads", "column_mapping"}

    components = json.loads(_dg(["list", "components", "--json"], cwd=project, env=env).stdout)
    assert "dagster_defs.ZerobusTableComponent" in json.dumps(components)
