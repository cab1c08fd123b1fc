"""zerobus-orchestration: write Arrow data into Databricks Delta tables through Zerobus.

The names a library user needs are importable from here::

    from zerobus_orchestration import acquire_runtime, load_config, read_files

    runtime = acquire_runtime(load_config())
    result = runtime.write("main.raw.orders", table, source="orders-job", partition="2026-11-30")
    runtime.write("main.raw.orders", read_files("landing/*.parquet"), source="orders-files")
    outcome = runtime.verify("main.raw.orders", source="orders-job", partition="2026-11-30")

Everything else (the pool, ack lanes, confirmations, catalog backends, the emulator) is an
implementation detail that may change between releases; ``docs/architecture.md`` maps it and
``docs/public-api.txt`` records this surface.

Kept light on import (every Airflow process imports the core): the names resolve on first
attribute access (``__getattr__``), so ``import zerobus_orchestration`` loads neither pyarrow nor
the SDK. The ``TYPE_CHECKING`` imports below let type checkers and IDEs see the same names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zerobus_orchestration.config import ZerobusConfig, load_config
    from zerobus_orchestration.errors import (
        ConfigError,
        CredentialsRefusedError,
        EmulatorExitedError,
        NeedsOperatorError,
        PlanRefusedError,
        PreconditionsUnmetError,
        ReadbackTimeoutError,
        RerunRefusedError,
        ResumeMismatchError,
        RunSupersededError,
        TableUnavailableError,
        WriteBoundaryError,
        ZerobusOrchestrationError,
    )
    from zerobus_orchestration.files import read_files
    from zerobus_orchestration.readback import ReadbackOutcome, ReadbackReport, ReadbackStatus
    from zerobus_orchestration.runtime.facade import ZerobusRuntime
    from zerobus_orchestration.runtime.registry import acquire_runtime, release_runtime
    from zerobus_orchestration.runtime.results import WriteResult
    from zerobus_orchestration.sink import CommitInfo, DeliveryFailedError, Receipt, ZerobusSink
    from zerobus_orchestration.transport.reachability import EndpointUnreachableError

from zerobus_orchestration._version import __version__

# Public name -> the module it is imported from; tests/unit/test_public_api.py checks it against ``__all__``.
_EXPORTS: dict[str, str] = {
    # configuration
    "ZerobusConfig": "zerobus_orchestration.config",
    "load_config": "zerobus_orchestration.config",
    # the per-process runtime: write, sink, read-back
    "ZerobusRuntime": "zerobus_orchestration.runtime.facade",
    "acquire_runtime": "zerobus_orchestration.runtime.registry",
    "release_runtime": "zerobus_orchestration.runtime.registry",
    "WriteResult": "zerobus_orchestration.runtime.results",
    "read_files": "zerobus_orchestration.files",
    "ZerobusSink": "zerobus_orchestration.sink",
    "Receipt": "zerobus_orchestration.sink",
    "CommitInfo": "zerobus_orchestration.sink",
    "ReadbackReport": "zerobus_orchestration.readback",
    "ReadbackStatus": "zerobus_orchestration.readback",
    "ReadbackOutcome": "zerobus_orchestration.readback",
    # errors a caller branches on (every one derives from ZerobusOrchestrationError)
    "ZerobusOrchestrationError": "zerobus_orchestration.errors",
    "ConfigError": "zerobus_orchestration.errors",
    "WriteBoundaryError": "zerobus_orchestration.errors",
    "PlanRefusedError": "zerobus_orchestration.errors",
    "PreconditionsUnmetError": "zerobus_orchestration.errors",
    "DeliveryFailedError": "zerobus_orchestration.sink",
    "ResumeMismatchError": "zerobus_orchestration.errors",
    "RunSupersededError": "zerobus_orchestration.errors",
    "RerunRefusedError": "zerobus_orchestration.errors",
    "ReadbackTimeoutError": "zerobus_orchestration.errors",
    "EndpointUnreachableError": "zerobus_orchestration.transport.reachability",
    "NeedsOperatorError": "zerobus_orchestration.errors",
    "CredentialsRefusedError": "zerobus_orchestration.errors",
    "EmulatorExitedError": "zerobus_orchestration.errors",
    "TableUnavailableError": "zerobus_orchestration.errors",
}

__all__ = [
    "CommitInfo",
    "ConfigError",
    "CredentialsRefusedError",
    "DeliveryFailedError",
    "EmulatorExitedError",
    "EndpointUnreachableError",
    "NeedsOperatorError",
    "PlanRefusedError",
    "PreconditionsUnmetError",
    "ReadbackOutcome",
    "ReadbackReport",
    "ReadbackStatus",
    "ReadbackTimeoutError",
    "Receipt",
    "RerunRefusedError",
    "ResumeMismatchError",
    "RunSupersededError",
    "TableUnavailableError",
    "WriteBoundaryError",
    "WriteResult",
    "ZerobusConfig",
    "ZerobusOrchestrationError",
    "ZerobusRuntime",
    "ZerobusSink",
    "__version__",
    "acquire_runtime",
    "load_config",
    "read_files",
    "release_runtime",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once; later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
