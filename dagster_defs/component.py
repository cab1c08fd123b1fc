"""``ZerobusTableComponent``: one Zerobus table declared in YAML, with its contract, checks and sensor.

A ``dg`` project (``defs/`` folder) declares a table in ``defs/<name>/defs.yaml``; ``dg scaffold defs
dagster_defs.ZerobusTableComponent <name> --asset-key raw/events`` writes a starting point::

    type: dagster_defs.ZerobusTableComponent
    attributes:
      asset_key: raw/events
      role: primary_raw                  # or derived
      owner: events-team
      columns:                           # or contract_path: events.odcs.yaml (ODCS, next to this file)
        - {name: event_id, type: BIGINT, description: Event number., nullable: false}
        - {name: tags, type: ARRAY<STRING>}
      compute: my_project.events:events  # optional: the function returning the table's rows

It builds what ``build_zerobus_definitions`` builds for one table: the contract asset and its blocking
primary-raw checks, the data asset (from ``compute``, declaring the contract: kinds, table name, column
schema) and a read-back sensor. Without ``compute`` the data asset is the project's own Python asset,
declared with ``deps=[contract_key_for(key)]``. Resources are bound once per project (several tables
share them), e.g. in ``defs/resources.py``::

    @dg.definitions
    def resources() -> dg.Definitions:
        zerobus = ZerobusResource()
        return dg.Definitions(resources={"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus)})

No ``from __future__ import annotations``: the component's fields are resolved from YAML at runtime.
"""

import importlib
import inspect
from collections.abc import Callable
from typing import Any, Literal

import dagster as dg
from dagster.components import Scaffolder, ScaffoldRequest, scaffold_component
from pydantic import BaseModel, Field

from dagster_defs.checks import ZerobusContract, build_contract_asset, build_readback_check
from dagster_defs.sensors import build_readback_sensor
from zerobus_orchestration.errors import ConfigError

READBACK_CHECK = "iceberg_readback"


class ZerobusColumn(dg.Model):
    """One declared column: Databricks SQL type text (nested types too) and its managed comment."""

    name: str = Field(description="Column name.")
    type: str = Field(
        description="Databricks SQL type: BIGINT, DECIMAL(18,2), ARRAY<STRING>, STRUCT<a: INT>..."
    )
    description: str | None = Field(default=None, description="Becomes the managed column comment.")
    nullable: bool = Field(default=True, description="false makes the column NOT NULL.")


class ZerobusTableScaffoldParams(BaseModel):
    asset_key: str | None = Field(default=None, description="The data asset's key, e.g. raw/events.")


class ZerobusTableScaffolder(Scaffolder[ZerobusTableScaffoldParams]):
    """``dg scaffold defs dagster_defs.ZerobusTableComponent <name> [--asset-key raw/events]``."""

    @classmethod
    def get_scaffold_params(cls) -> type[ZerobusTableScaffoldParams]:
        return ZerobusTableScaffoldParams

    def scaffold(self, request: ScaffoldRequest[ZerobusTableScaffoldParams]) -> None:
        key = request.params.asset_key or f"raw/{request.target_path.name}"
        scaffold_component(
            request,
            {
                "asset_key": key,
                "role": "primary_raw",
                "columns": [
                    {"name": "id", "type": "BIGINT", "description": "Row identifier.", "nullable": False},
                    {"name": "payload", "type": "STRING", "description": "What the source sent."},
                ],
            },
        )


def _import_compute(path: str, *, where: str) -> Callable[..., Any]:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"{where}: compute {path!r} cannot be imported ({exc}); use 'module:function'"
        ) from None
    if not callable(fn):
        raise ConfigError(f"{where}: compute {path!r} is not a function")
    return fn  # type: ignore[no-any-return]


@dg.scaffold_with(ZerobusTableScaffolder)
class ZerobusTableComponent(dg.Component, dg.Model, dg.Resolvable):
    """A Zerobus table: its contract asset, primary-raw checks, data asset and read-back sensor."""

    asset_key: str = Field(description="The data asset's key, '/'-separated: raw/events -> main.raw.events.")
    columns: list[ZerobusColumn] | None = Field(default=None, description="The declared columns.")
    contract_path: str | None = Field(
        default=None, description="An ODCS contract instead of columns, relative to this defs.yaml."
    )
    contract_object: str | None = Field(default=None, description="The ODCS schema object, when several.")
    role: Literal["primary_raw", "derived"] = Field(default="primary_raw", description="Table role.")
    owner: str | None = Field(default=None, description="Stamped as the table's twg.owner property.")
    catalog: str = Field(default="main", description="Unity Catalog catalog of the table.")
    table: str | None = Field(default=None, description="Table name or full name, overriding the key's.")
    compute: str | None = Field(
        default=None,
        description="'module:function' returning the rows (Arrow, pandas, polars, RecordBatchReader); "
        "called with the asset context when it takes an argument. Omit to declare the asset in Python.",
    )
    description: str | None = Field(default=None, description="The data asset's description.")
    group_name: str | None = Field(default=None, description="Asset group of the table's assets.")
    resource_key: str = Field(default="zerobus", description="Key of the bound ZerobusResource.")
    io_manager_key: str = Field(default="io_manager", description="Key of the bound ZerobusIOManager.")
    readback_sensor: bool = Field(default=True, description="Add a read-back sensor for the data asset.")
    readback_check: bool = Field(
        default=False, description="Add an iceberg_readback check the sensor reports."
    )
    max_lag_s: float = Field(
        default=900.0, description="Read-back lag before the sensor requests a recovery."
    )

    def contract(self, context: dg.ComponentLoadContext) -> ZerobusContract:
        key = dg.AssetKey.from_user_string(self.asset_key)
        column_schema = None
        if self.columns is not None:
            column_schema = dg.TableSchema(
                columns=[
                    dg.TableColumn(
                        c.name, c.type, c.description, dg.TableColumnConstraints(nullable=c.nullable)
                    )
                    for c in self.columns
                ]
            )
        return build_contract_asset(
            key,
            column_schema=column_schema,
            contract_path=(context.path / self.contract_path) if self.contract_path else None,
            contract_object=self.contract_object,
            owner=self.owner,
            role=self.role,
            catalog=self.catalog,
            table=self.table,
            resource_key=self.resource_key,
            group_name=self.group_name,
        )

    def _data_asset(self, contract: ZerobusContract) -> dg.AssetsDefinition | None:
        if self.compute is None:
            return None
        where = f"ZerobusTableComponent {self.asset_key}"
        fn = _import_compute(self.compute, where=where)
        wants_context = bool(inspect.signature(fn).parameters)

        @dg.asset(
            key=contract.data_key,
            deps=[contract.key],
            kinds=contract.kinds,
            metadata=dict(contract.data_metadata),
            group_name=self.group_name,
            io_manager_key=self.io_manager_key,
            description=self.description or f"Rows of {contract.table}, written through Zerobus.",
        )
        def _data(context: dg.AssetExecutionContext) -> Any:
            return fn(context) if wants_context else fn()

        return _data

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        contract = self.contract(context)
        key = contract.data_key
        data = self._data_asset(contract)
        checks: list[dg.AssetChecksDefinition] = [*([contract.checks] if contract.checks else [])]
        if self.readback_check:
            checks.append(build_readback_check(key, name=READBACK_CHECK, resource_key=self.resource_key))
        sensors = []
        if self.readback_sensor:
            sensors.append(
                build_readback_sensor(
                    [key],
                    name=f"zerobus_readback__{key.to_python_identifier()}",
                    resource_key=self.resource_key,
                    max_lag_s=self.max_lag_s,
                    check_name=READBACK_CHECK if self.readback_check else None,
                )
            )
        return dg.Definitions(
            assets=[contract.asset, *([data] if data is not None else [])],
            asset_checks=checks,
            sensors=sensors,
        )
