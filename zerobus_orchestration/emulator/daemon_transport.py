"""The SDK transport to the embedded emulator, and for a shared daemon one that follows its successor.

The official SDK client is bound to one endpoint and token URL. When a shared daemon dies and another
takes over (``handle.RemoteEmulator``), the successor usually serves on the same ports, and streams the
SDK is still recovering reconnect to it by themselves. Otherwise, and for every stream the SDK gave up
on, the pool opens a new one: ``DaemonTransport.open_stream`` first makes sure a daemon serves (starting
or reattaching to one), then opens the stream against its current endpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pyarrow as pa

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.handle import EmulatorHandle, RemoteEmulator, RemoteEmulatorError
from zerobus_orchestration.emulator.private import with_warehouse_secret
from zerobus_orchestration.errors import TransientError
from zerobus_orchestration.transport.base import Stream, Transport

log = logging.getLogger(__name__)

BuildTransport = Callable[[str, str], Transport]
"""(endpoint, token URL) -> a transport bound to them."""


class DaemonTransport:
    """``Transport`` to whichever daemon currently serves the warehouse of ``handle``."""

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
        try:
            advert = self._handle.ensure_live()
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


def emulator_transport(config: ZerobusConfig, emulator: EmulatorHandle) -> Transport:
    """The SDK transport to ``emulator`` with the warehouse's client credentials."""
    from zerobus_orchestration.transport.sdk import SdkTransport

    local = with_warehouse_secret(config)

    def build(endpoint: str, token_url: str) -> Transport:
        return SdkTransport.from_config(local, endpoint=endpoint, token_url=token_url)

    if isinstance(emulator, RemoteEmulator):
        return DaemonTransport(emulator, build)
    return build(emulator.endpoint, emulator.workspace_url)
