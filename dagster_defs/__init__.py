"""Dagster integration for zerobus-orchestration: resource, IO manager, contract assets, sensor, component.

Everything here adapts the orchestrator-neutral runtime (``zerobus_orchestration.runtime.facade``); nothing
imports ``airflow_provider``.
"""

from dagster_defs.checks import (
    PRIMARY_RAW_CHECKS as PRIMARY_RAW_CHECKS,
)
from dagster_defs.checks import (
    ZerobusContract as ZerobusContract,
)
from dagster_defs.checks import (
    build_contract_asset as build_contract_asset,
)
from dagster_defs.checks import (
    build_readback_check as build_readback_check,
)
from dagster_defs.component import (
    ZerobusColumn as ZerobusColumn,
)
from dagster_defs.component import (
    ZerobusTableComponent as ZerobusTableComponent,
)
from dagster_defs.definitions import build_zerobus_definitions as build_zerobus_definitions
from dagster_defs.handlers import (
    ArrowTypeHandler as ArrowTypeHandler,
)
from dagster_defs.handlers import (
    PandasTypeHandler as PandasTypeHandler,
)
from dagster_defs.handlers import (
    PolarsTypeHandler as PolarsTypeHandler,
)
from dagster_defs.handlers import (
    ZerobusTypeHandler as ZerobusTypeHandler,
)
from dagster_defs.io_manager import (
    ZerobusIOManager as ZerobusIOManager,
)
from dagster_defs.io_manager import (
    ZerobusPandasIOManager as ZerobusPandasIOManager,
)
from dagster_defs.io_manager import (
    ZerobusPolarsIOManager as ZerobusPolarsIOManager,
)
from dagster_defs.metadata import (
    column_schema_from_arrow as column_schema_from_arrow,
)
from dagster_defs.naming import (
    contract_key_for as contract_key_for,
)
from dagster_defs.naming import (
    coverage_keys as coverage_keys,
)
from dagster_defs.naming import (
    partition_for as partition_for,
)
from dagster_defs.naming import (
    source_for as source_for,
)
from dagster_defs.naming import (
    table_ref as table_ref,
)
from dagster_defs.resource import ZerobusResource as ZerobusResource
from dagster_defs.sensors import build_readback_sensor as build_readback_sensor
