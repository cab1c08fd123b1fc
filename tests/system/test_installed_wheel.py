"""The built wheel on its own: the Dagster quickstart and the demo's Dagster flavour work from an install.

The wheel is built from this checkout and installed (without dependencies) into a fresh virtualenv in a
temporary directory. That venv sees the development venv's third-party packages through a ``.pth``
line, which adds the folder without running the editable install's own ``.pth`` hooks, so neither this
checkout nor its ``examples/`` package is importable there: only what the wheel ships.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

PROBE = """
import importlib.util, json, sys
from importlib.metadata import entry_points

import dagster as dg
import zerobus_orchestration
from dagster_defs import quickstart

(flavour,) = entry_points(group="zerobus_orchestration.demos", name="dagster")
(registry,) = entry_points(group="dagster_dg_cli.registry_modules", name="dagster_defs")
dg.Definitions.validate_loadable(quickstart.defs)
graph = quickstart.defs.resolve_asset_graph()
# The README's quickstart run (`dg launch ... --job zerobus_job`), in process on a fresh warehouse.
from dagster_defs import ZerobusResource
from zerobus_orchestration.runtime.registry import close_all_runtimes
resource = ZerobusResource(warehouse=sys.argv[1], options={"emulator.mode": "in_process"})
run = quickstart.build_definitions(resource).resolve_job_def("zerobus_job").execute_in_process(
    run_config={"ops": {"raw__orders": {"config": {"rows": 2000}}}}
)
orders = run.asset_materializations_for_node("raw__orders")[0].metadata["zerobus/rows_written"].value
close_all_runtimes()
print(json.dumps({
    "core": zerobus_orchestration.__file__,
    "quickstart": quickstart.__file__,
    "flavour": flavour.load().__module__,
    "examples_importable": importlib.util.find_spec("examples") is not None,
    "assets": sorted(k.to_user_string() for k in graph.get_all_asset_keys()),
    "job": quickstart.defs.resolve_job_def("zerobus_job").name,
    "api": sorted(zerobus_orchestration.__all__),
    "registry": registry.value,
    "run_success": run.success,
    "orders_written": orders,
}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_quickstart_loads_from_the_installed_wheel_alone(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            ".",
        ],
        cwd=REPO,
    )
    (wheel,) = dist.glob("zerobus_orchestration-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)  # fmt: skip
    venv_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).strip())  # fmt: skip
    dev_site = sysconfig.get_paths()["purelib"]
    assert dev_site in site.getsitepackages()
    (venv_site / "dev_dependencies.pth").write_text(dev_site + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    (tmp_path / "dagster_home").mkdir()
    warehouse = str(tmp_path / "warehouse")
    probe = [str(python), "-c", PROBE, warehouse]
    found = json.loads(_run(probe, cwd=tmp_path, env=env).strip().splitlines()[-1])

    assert Path(found["core"]).is_relative_to(venv_site), found  # the wheel's copy, not this checkout
    assert Path(found["quickstart"]).is_relative_to(venv_site), found
    assert found["examples_importable"] is False  # nothing but the wheel's packages
    assert found["flavour"] == "dagster_defs.demo"  # the entry point the wheel registers
    assert found["assets"] == ["analytics/daily_order_totals", "raw/orders", "raw/orders__contract"]
    assert found["job"] == "zerobus_job"
    assert found["registry"] == "dagster_defs"  # `dg list components` finds ZerobusTableComponent
    assert found["run_success"] is True and found["orders_written"] == 2000
    import zerobus_orchestration

    assert found["api"] == sorted(zerobus_orchestration.__all__)
