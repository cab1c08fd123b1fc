"""``build_zerobus_definitions``: resource, IO manager, contract assets, checks, sensor and a job, wired."""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from dagster_defs.checks import ZerobusContract, build_readback_check
from dagster_defs.io_manager import ZerobusIOManager
from dagster_defs.resource import ZerobusResource
from dagster_defs.sensors import build_readback_sensor
from zerobus_orchestration.errors import ConfigError

JOB_NAME = "zerobus_job"
SENSOR_NAME = "zerobus_readback"
READBACK_CHECK = "iceberg_readback"


def _keys_of(assets: Sequence[Any]) -> list[dg.AssetKey]:
    keys: list[dg.AssetKey] = []
    for a in assets:
        if isinstance(a, dg.AssetsDefinition):
            keys.extend(a.keys)
        elif isinstance(a, dg.AssetSpec):
            keys.append(a.key)
    return keys


def _upstream_keys(assets: Sequence[Any]) -> dict[dg.AssetKey, set[dg.AssetKey]]:
    upstream: dict[dg.AssetKey, set[dg.AssetKey]] = {}
    for a in assets:
        if isinstance(a, dg.AssetsDefinition):
            for key in a.keys:
                upstream[key] = set(a.asset_deps.get(key, ()))
        elif isinstance(a, dg.AssetSpec):
            upstream[a.key] = {dep.asset_key for dep in a.deps}
    return upstream


def _require_contract_deps(assets: Sequence[Any], tables: Sequence[ZerobusContract]) -> None:
    """Each table's data asset must depend on its contract asset.

    Blocking checks gate only downstream steps: without the dependency the write may run before (or
    without waiting for) the contract's primary-raw checks, and a failed check would not stop it.
    """
    upstream = _upstream_keys(assets)
    for contract in tables:
        data = contract.data_key.to_user_string()
        fix = f"deps=[dg.AssetKey({list(contract.key.path)!r})] (the contract's .key)"
        if contract.data_key not in upstream:
            raise ConfigError(
                f"build_zerobus_definitions: the contract of {contract.table} is for asset {data}, which is "
                f"not in assets=; add that asset, declared with {fix}, or drop the contract from tables="
            )
        if contract.key not in upstream[contract.data_key]:
            raise ConfigError(
                f"build_zerobus_definitions: asset {data} does not depend on its contract asset "
                f"{contract.key.to_user_string()}, so the blocking checks of {contract.table} cannot gate "
                f"its write; declare the asset with {fix}"
            )


def _declare_contracts(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec], tables: Sequence[ZerobusContract]
) -> list[dg.AssetsDefinition | dg.AssetSpec]:
    """Each table's data asset declaring its contract (``ZerobusContract.attach``): the catalog UI shows
    the table's name, columns and kinds on the data asset, and a run of it alone reconciles from them."""
    declared: list[dg.AssetsDefinition | dg.AssetSpec] = []
    for asset in assets:
        for contract in tables:
            if isinstance(asset, dg.AssetsDefinition) and contract.data_key in asset.keys:
                asset = contract.attach(asset)
        declared.append(asset)
    return declared


def build_zerobus_definitions(
    *,
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    tables: Sequence[ZerobusContract] = (),
    resource: ZerobusResource | None = None,
    io_manager: ZerobusIOManager | None = None,
    catalog: str = "main",
    schema: str | None = None,
    resource_key: str = "zerobus",
    io_manager_key: str = "io_manager",
    readback_sensor: bool = True,
    readback_checks: bool = False,
    readback_assets: Sequence[dg.AssetKey] | None = None,
    max_lag_s: float = 900.0,
    executor: dg.ExecutorDefinition | None = dg.in_process_executor,
    extra_resources: dict[str, Any] | None = None,
) -> dg.Definitions:
    """Definitions for ``assets`` written through Zerobus, with the ``tables``' contract assets and checks.

    - ``resource``: default ``ZerobusResource()`` (embedded emulator on ./.zerobus/warehouse);
    - ``io_manager``: default ``ZerobusIOManager(zerobus=resource, catalog=catalog, schema=schema)``,
      bound as ``io_manager_key``;
    - each table's data asset declares its contract (``ZerobusContract.attach``: ``dagster/table_name``,
      ``dagster/column_schema``, kinds ``databricks`` and ``delta``), so the IO manager reconciles the
      table from the contract even in a run without the contract asset;
    - a job ``zerobus_job`` selecting every asset, contract and check (blocking checks gate only what is
      selected), running in process by default: one pool per run instead of one per step process;
    - the read-back sensor ``zerobus_readback`` over ``readback_assets`` (default: every asset given);
      with ``readback_checks`` an ``iceberg_readback`` check per asset, reported by the sensor too.

    Raises ``ConfigError`` when a table's data asset is missing from ``assets`` or does not depend on
    its contract asset: the blocking checks would then not gate the write.
    """
    _require_contract_deps(assets, tables)
    zerobus = resource if resource is not None else ZerobusResource()
    manager = io_manager or ZerobusIOManager(zerobus=zerobus, catalog=catalog, schema=schema)
    all_assets = [*(c.asset for c in tables), *_declare_contracts(assets, tables)]
    contract_checks = [c.checks for c in tables if c.checks is not None]
    monitored = list(readback_assets) if readback_assets is not None else _keys_of(assets)
    readback = [build_readback_check(k, name=READBACK_CHECK, resource_key=resource_key) for k in monitored]
    checks = [*contract_checks, *(readback if readback_checks else [])]
    sensors = (
        [
            build_readback_sensor(
                monitored,
                name=SENSOR_NAME,
                resource_key=resource_key,
                max_lag_s=max_lag_s,
                check_name=READBACK_CHECK if readback_checks else None,
            )
        ]
        if readback_sensor and monitored
        else []
    )
    job = dg.define_asset_job(
        JOB_NAME,
        selection=dg.AssetSelection.all() | dg.AssetSelection.all_asset_checks(),
        executor_def=executor,
    )
    resources: dict[str, Any] = {resource_key: zerobus, io_manager_key: manager, **(extra_resources or {})}
    return dg.Definitions(
        assets=all_assets,
        asset_checks=checks,
        sensors=sensors,
        jobs=[job],
        resources=resources,
        executor=executor,
    )
