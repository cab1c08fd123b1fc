"""Local Zerobus service for the official SDK: gRPC row and Arrow ingest, OAuth, WAL, Delta, Iceberg.

See ``server.Emulator`` (in-process) and ``python -m zerobus_orchestration.emulator`` /
``zerobus-orch serve`` (foreground). Heavy modules are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zerobus_orchestration.emulator.errors import EmulatorError
    from zerobus_orchestration.emulator.faults import FaultInjector, FaultKind, FaultSpec, load_faults
    from zerobus_orchestration.emulator.server import Emulator

__all__ = ["Emulator", "EmulatorError", "FaultInjector", "FaultKind", "FaultSpec", "load_faults"]


def __getattr__(name: str) -> Any:
    if name == "Emulator":
        from zerobus_orchestration.emulator import server

        return server.Emulator
    if name == "EmulatorError":
        from zerobus_orchestration.emulator import errors

        return errors.EmulatorError
    if name in ("FaultInjector", "FaultKind", "FaultSpec", "load_faults"):
        from zerobus_orchestration.emulator import faults

        return getattr(faults, name)
    raise AttributeError(name)
