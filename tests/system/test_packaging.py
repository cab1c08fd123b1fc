"""Import hygiene: every Airflow process imports provider info, so it must stay light."""

from __future__ import annotations

import json
import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_three_packages_import() -> None:
    subprocess.run(
        [sys.executable, "-c", "import zerobus_orchestration, dagster_defs, airflow_provider"], check=True
    )


def test_airflow_provider_imports_nothing_heavy() -> None:
    loaded = _modules_after(
        "import airflow_provider\nfrom airflow_provider.get_provider_info import get_provider_info\n"
        "get_provider_info()"
    )
    heavy = {"pyarrow", "dagster", "zerobus", "pyiceberg", "deltalake", "grpc"}
    assert not heavy & {name.split(".")[0] for name in loaded}


def test_provider_info_names_the_distribution() -> None:
    from importlib.metadata import entry_points

    from airflow_provider.get_provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "zerobus-orchestration"
    eps = [
        ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_provider.")
    ]
    assert eps, "the apache_airflow_provider entry point is not registered"
    assert eps[0].load() is get_provider_info


def test_cli_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "zerobus_orchestration.cli.main", "--help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "demo" in out


def test_dag_files_parse_without_pyarrow() -> None:
    """A DAG file imports the operators on every parse: they load pyarrow only when a task executes."""
    loaded = _modules_after(
        "from airflow_provider.operators.ingest import ZerobusIngestOperator\n"
        "from airflow_provider.operators.catalog import ZerobusReconcileOperator\n"
        "from airflow_provider.sensors.readback import ZerobusReadbackSensor"
    )
    heavy = {"pyarrow", "dagster", "zerobus", "pyiceberg", "deltalake", "grpc"}
    assert not heavy & {name.split(".")[0] for name in loaded}
