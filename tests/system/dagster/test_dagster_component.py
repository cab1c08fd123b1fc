"""``ZerobusTableComponent``: a table declared in a ``dg`` project's YAML, scaffolded and run by Dagster."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from dagster_defs import PRIMARY_RAW_CHECKS, ZerobusResource, ZerobusTableComponent
from zerobus_orchestration.catalog.base import TableState
from zerobus_orchestration.errors import ConfigError

KEY = dg.AssetKey(["raw", "clicks"])
ATTRIBUTES: dict[str, Any] = {
    "asset_key": "raw/clicks",
    "owner": "web-team",
    "columns": [
        {"name": "click_id", "type": "BIGINT", "description": "Click number.", "nullable": False},
        {"name": "amount", "type": "DECIMAL(18,2)"},
        {"name": "labels", "type": "ARRAY<STRING>", "description": "Labels."},
    ],
    "compute": f"{__name__}:clicks",
}


def clicks() -> pa.Table:
    # Inferred: click_id nullable, amount DECIMAL(4,2); the table must follow the YAML, not this.
    from decimal import Decimal

    return pa.table(
        {
            "click_id": [1, 2, 3],
            "amount": [Decimal("10.50"), Decimal("2.25"), None],
            "labels": [["a"], [], None],
        }
    )


@contextmanager
def component_defs(attributes: dict[str, Any], resources: dict[str, object]) -> Iterator[dg.Definitions]:
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(
            ZerobusTableComponent,
            defs_path="clicks",
            defs_yaml_contents={"type": "dagster_defs.ZerobusTableComponent", "attributes": attributes},
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, ZerobusTableComponent)
            yield dg.Definitions.merge(defs, dg.Definitions(resources=resources))


def _columns(zerobus: ZerobusResource) -> dict[str, tuple[str, bool]]:
    state = zerobus.runtime.catalog.describe("main.raw.clicks")
    assert isinstance(state, TableState)
    return {c.name: (c.delta_type, c.nullable) for c in state.columns if not c.name.startswith("_twg_")}


def test_dg_scaffold_writes_a_table_declaration() -> None:
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(
            ZerobusTableComponent, defs_path="events", scaffold_params={"asset_key": "raw/events"}
        )
        declared = yaml.safe_load((path / "defs.yaml").read_text())
        assert declared["type"].endswith("ZerobusTableComponent")
        assert declared["attributes"]["asset_key"] == "raw/events"
        assert declared["attributes"]["columns"][0] == {
            "name": "id",
            "type": "BIGINT",
            "description": "Row identifier.",
            "nullable": False,
        }
        with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
            # Without compute the data asset is the project's own Python asset.
            keys = {k.to_user_string() for a in defs.assets or () for k in a.keys}  # type: ignore[union-attr]
            assert keys == {"raw/events__contract"}


def test_the_component_builds_contract_checks_data_asset_and_sensor(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    with component_defs(ATTRIBUTES, resources) as defs:
        graph = defs.resolve_asset_graph()
        node = graph.get(KEY)
        assert node.kinds == {"databricks", "delta"}
        assert node.metadata["dagster/table_name"] == "main.raw.clicks"
        assert {k.name for k in graph.asset_check_keys} == set(PRIMARY_RAW_CHECKS)
        assert defs.resolve_sensor_def("zerobus_readback__raw__clicks") is not None

        result = defs.resolve_implicit_global_asset_job_def().execute_in_process()
        assert result.success
        assert all(e.passed for e in result.get_asset_check_evaluations())

    assert _columns(zerobus) == {
        "click_id": ("BIGINT", False),
        "amount": ("DECIMAL(18,2)", True),
        "labels": ("ARRAY<STRING>", True),
    }
    state = zerobus.runtime.catalog.describe("main.raw.clicks")
    assert state is not None and state.properties.get("twg.owner") == "web-team"
    assert zerobus.runtime.verify("main.raw.clicks", source="raw/clicks").verified
    assert zerobus.runtime.read_rows("main.raw.clicks").num_rows == 3


def test_the_data_asset_alone_follows_the_yaml_contract(
    zerobus: ZerobusResource, resources: dict[str, object]
) -> None:
    with component_defs(ATTRIBUTES, resources) as defs:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(asset_selection=[KEY]).success
    assert _columns(zerobus)["click_id"] == ("BIGINT", False)
    assert _columns(zerobus)["amount"] == ("DECIMAL(18,2)", True)


def test_a_bad_compute_path_names_the_table_and_the_fix(resources: dict[str, object]) -> None:
    with (
        pytest.raises(Exception) as caught,
        component_defs({**ATTRIBUTES, "compute": "no_such_module:rows"}, resources),
    ):
        pass
    chain = [caught.value, *_causes(caught.value)]
    found = next((e for e in chain if isinstance(e, ConfigError)), None)
    assert found is not None, chain
    assert "raw/clicks" in str(found) and "module:function" in str(found)


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        out.append(exc)
    return out


def test_the_component_is_declared_where_dg_finds_it() -> None:
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    import tomllib

    entry_points = tomllib.loads(pyproject.read_text())["project"]["entry-points"]
    assert entry_points["dagster_dg_cli.registry_modules"] == {"dagster_defs": "dagster_defs"}
