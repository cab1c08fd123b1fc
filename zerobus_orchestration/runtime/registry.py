"""The process's runtimes and read-back services, one per config (the documented per-process registry).

``acquire_runtime(config)`` returns this process's ``ZerobusRuntime`` for that config, created on first
use and refcounted (``process_registry.ProcessRegistry``: keyed by pid and config hash, drained by the exit
hooks). ``readback_service(config)`` is the read-only read-back for processes that never write
(sensor ticks, trigger polls, the CLI): it borrows a running runtime's, else keeps a standalone one.
"""

from __future__ import annotations

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.process_registry import ProcessRegistry
from zerobus_orchestration.runtime.readback_service import ReadbackService

_RUNTIMES: ProcessRegistry[ZerobusRuntime] = ProcessRegistry(ZerobusRuntime, what="zerobus runtime")


def acquire_runtime(config: ZerobusConfig) -> ZerobusRuntime:
    """This process's runtime for ``config``, created on first use; refcounted."""
    if _RUNTIMES.running(config) is None:
        # A verifier's in-process emulator would hold the warehouse the runtime's emulator needs; the
        # runtime's own read-back service takes over (see ``readback_service``).
        standalone = _READBACKS.discard(config)
        if standalone is not None:
            standalone.close()
    return _RUNTIMES.acquire(config)


def running_runtime(config: ZerobusConfig) -> ZerobusRuntime | None:
    """This process's runtime for ``config`` if one is running; never starts one (progress displays)."""
    return _RUNTIMES.running(config)


def release_runtime(config: ZerobusConfig) -> None:
    """Drop one reference. The runtime stays: it is meant to outlive a step, a task try or a tick."""
    _RUNTIMES.release(config)


def close_all_runtimes() -> None:
    """Drain and close every runtime (and read-back service) of this process. Idempotent; safe at exit."""
    _RUNTIMES.close_all()
    _READBACKS.close_all()


# -- read-back without a write runtime ----------------------------------------------------------------

_READBACKS: ProcessRegistry[ReadbackService] = ProcessRegistry(
    ReadbackService.from_config, what="zerobus read-back service"
)


def readback_service(config: ZerobusConfig) -> ReadbackService:
    """The read-only read-back of ``config`` for this process (sensor ticks, trigger polls, the CLI).

    A runtime this process already runs lends its own (its emulator, no second one); otherwise a
    standalone ``ReadbackService`` built from the config alone (no stream pool, no transport), kept
    for the process so ticks and polls reuse its catalog client and Iceberg endpoint. Never close it:
    ``close_all_runtimes`` and the exit hooks do.
    """
    running = running_runtime(config)
    if running is not None:
        return running.readbacks
    return _READBACKS.acquire(config)
