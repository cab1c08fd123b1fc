"""Embedded mode: the core's one way into the local emulator.

When no endpoint is configured, the runtime writes through the official SDK to an emulator it starts
here: in this process (``emulator.mode = "in_process"``) or the warehouse's shared daemon, found or
started (``"daemon"``). This module composes what the emulator does not import: the credential
vending its Iceberg REST facade hands readers (catalog code), and the SDK transport to it (with the
warehouse's own client secret; for a daemon, one that follows a successor when the daemon dies).

It is also the daemon's entry point (``python -m zerobus_orchestration.runtime.embedded --daemon``, started by
``emulator.launcher``), so the daemon vends credentials without the emulator importing the catalog.

The emulator needs ``grpcio`` and a recent ``protobuf`` that a production install (the SDK against
Databricks) does not: they come with the ``emulator`` extra, and embedded mode without them fails
with ``EmulatorNotInstalledError`` before anything starts.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import ConfigError, EmulatorExitedError, TransientError
from zerobus_orchestration.storage import CredentialCache
from zerobus_orchestration.transport.base import Stream, Transport

if TYPE_CHECKING:
    from zerobus_orchestration.emulator.handle import EmulatorHandle as EmulatorHandle  # the runtime's too
    from zerobus_orchestration.emulator.handle import RemoteEmulator

log = logging.getLogger(__name__)

EMULATOR_EXTRA_HINT = "pip install 'zerobus-orchestration[emulator]'"
# Importing the generated gRPC stubs checks both floors (grpcio and the protobuf runtime) the way the
# emulator will, so a missing or old dependency is reported here, with the fix, not from a gRPC thread.
_EMULATOR_PROBE = "zerobus_orchestration.emulator.proto.zerobus_service_pb2_grpc"


class EmulatorNotInstalledError(ConfigError):
    """Embedded mode was asked for, and the emulator's dependencies are not installed."""


def require_emulator() -> None:
    """Raise ``EmulatorNotInstalledError`` (naming the extra) unless the emulator can be imported."""
    try:
        importlib.import_module(_EMULATOR_PROBE)
    # ImportError: grpcio missing; RuntimeError: grpcio too old; protobuf's VersionError (an Exception):
    # its runtime too old. Generated stubs fail to import for no other reason.
    except Exception as exc:
        raise _not_installed(exc) from exc


def _not_installed(exc: BaseException) -> EmulatorNotInstalledError:
    return EmulatorNotInstalledError(
        "embedded mode (no zerobus.endpoint configured) runs the local Zerobus emulator, which needs "
        f"grpcio and protobuf versions this install lacks ({type(exc).__name__}: {exc}); fix: "
        f"{EMULATOR_EXTRA_HINT}, or set zerobus.endpoint to write to Databricks"
    )


def build_credentials(config: ZerobusConfig) -> CredentialCache | None:
    """The read-back credential cache ``zerobus.credential_vending`` asks for (embedded ``s3://`` only)."""
    if not (config.credential_vending.enabled and config.embedded):
        return None
    from zerobus_orchestration.catalog.s3_vending import S3CredentialVendor

    margin = timedelta(seconds=config.credential_vending.refresh_margin_s)
    return CredentialCache(S3CredentialVendor.from_config(config), margin=margin)


def start_emulator(config: ZerobusConfig, credentials: CredentialCache | None = None) -> EmulatorHandle:
    """The emulator this process writes to: the shared daemon (found or started) or one of its own."""
    require_emulator()
    if config.emulator.mode == "daemon":  # one shared emulator process per warehouse
        from zerobus_orchestration.emulator.launcher import connect_daemon

        return connect_daemon(config, entry_module=__name__)
    from zerobus_orchestration.emulator.start import start_emulator as start_in_process

    return start_in_process(config, credentials)


def readback_emulator(config: ZerobusConfig) -> EmulatorHandle:
    """The emulator a read-only verifier reads through (its Iceberg REST facade), without a lease.

    Only an emulator serves the embedded Iceberg endpoint and commits acknowledged rows from its
    write-ahead log to Delta, so read-back needs one. Daemon mode: the warehouse's shared daemon,
    started only when none serves; the handle holds no lease, so the daemon still idles out between
    sensor ticks, and the handle's next use finds or starts its successor. In-process mode: one in
    this process (the caller stops it); that mode keeps one process per warehouse.
    """
    require_emulator()
    if config.emulator.mode == "daemon":
        from zerobus_orchestration.emulator.launcher import connect_daemon

        return connect_daemon(config, entry_module=__name__, watch=False)
    from zerobus_orchestration.emulator.start import start_emulator as start_in_process

    return start_in_process(config, build_credentials(config))


def build_transport(config: ZerobusConfig, emulator: EmulatorHandle | None) -> Transport:
    """The SDK transport: to ``emulator`` with the warehouse's client secret, else to Databricks."""
    from zerobus_orchestration.transport.sdk import SdkTransport

    if emulator is None:
        return SdkTransport.from_config(config)
    from zerobus_orchestration.emulator.handle import RemoteEmulator
    from zerobus_orchestration.emulator.private import with_warehouse_secret

    local = with_warehouse_secret(config)

    def build(endpoint: str, token_url: str) -> Transport:
        return SdkTransport.from_config(local, endpoint=endpoint, token_url=token_url)

    if isinstance(emulator, RemoteEmulator):  # a dead shared daemon is replaced, streams follow it
        return DaemonTransport(emulator, build)
    return build(emulator.endpoint, emulator.workspace_url)


BuildTransport = Callable[[str, str], Transport]
"""(endpoint, token URL) -> a transport bound to them."""


class DaemonTransport:
    """``Transport`` to whichever daemon currently serves the warehouse of ``handle``.

    The official SDK client is bound to one endpoint and token URL. When a shared daemon dies and
    another takes over, the successor usually serves on the same ports, and streams the SDK is still
    recovering reconnect to it by themselves. Otherwise, and for every stream the SDK gave up on, the
    pool opens a new one: ``open_stream`` first makes sure a daemon serves (starting or reattaching to
    one), then opens the stream against its current endpoint. A daemon that exited and whose successor
    exited while starting fails the open with ``EmulatorExitedError`` naming its pid and log: the write
    fails once the SDK gave up on its streams, instead of waiting out ``pool.healthy_member_wait_s``.
    """

    def __init__(self, handle: RemoteEmulator, build: BuildTransport) -> None:
        self._handle = handle
        self._build = build
        self._lock = threading.Lock()
        self._endpoint = handle.endpoint
        self._inner = build(handle.endpoint, handle.workspace_url)

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def open_stream(self, table: str, schema: pa.Schema) -> Stream:
        from zerobus_orchestration.emulator.errors import DaemonExitedError, RemoteEmulatorError

        try:
            advert = self._handle.ensure_live()
        except DaemonExitedError as exc:
            if exc.successor_exited:  # what made it exit stays until someone acts (its log says what)
                raise EmulatorExitedError(
                    f"{exc} (open stream for {table})", pid=exc.pid, log=exc.log
                ) from exc
            raise TransientError(f"{exc} (open stream for {table})", code="UNAVAILABLE") from exc
        except RemoteEmulatorError as exc:  # retryable: the pool backs off and asks again
            raise TransientError(f"open stream for {table}: {exc}", code="UNAVAILABLE") from exc
        with self._lock:
            if advert.endpoint != self._endpoint:
                log.warning(
                    "%s: streams now go to the shared emulator %d at %s", table, advert.pid, advert.endpoint
                )
                self._inner.close()
                self._inner = self._build(advert.endpoint, advert.workspace_url)
                self._endpoint = advert.endpoint
            inner = self._inner
        return inner.open_stream(table, schema)

    def close(self) -> None:
        with self._lock:
            self._inner.close()


def daemon_main(argv: list[str] | None = None) -> None:
    """``python -m zerobus_orchestration.emulator`` with this config's credential vending handed in."""
    from zerobus_orchestration.emulator.serve import main

    main(argv, credentials_for=build_credentials)


if __name__ == "__main__":
    daemon_main()
