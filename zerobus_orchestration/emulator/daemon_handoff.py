"""What a client hands the daemon it starts, and where both find each other (no server code here).

``launcher`` (the client side) starts ``python -m zerobus_orchestration.runtime.embedded --daemon`` with the
config on stdin and, when it replaces a dead daemon, its ports; ``daemon`` (the server side) reads the
same. Both sides import these from here, so a client never loads the emulator's server, Iceberg REST
facade and materialiser (~0.7 s of imports) just to find or start a daemon.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import SecretStr

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.advert import DaemonPaths
from zerobus_orchestration.locations import absolute_state_dir, local_path

PREFER_PORTS_FLAG = "--prefer-ports"  # "GRPC,HTTP": a dead predecessor's ports, tried before free ones


def daemon_paths(config: ZerobusConfig) -> DaemonPaths:
    return DaemonPaths(absolute_state_dir(config.state_path))


def config_for_daemon(config: ZerobusConfig) -> str:
    """``config`` as JSON for the daemon's stdin: secrets revealed (never on argv), paths absolute."""

    def reveal(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, dict):
            return {k: reveal(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [reveal(v) for v in value]
        return value

    data = reveal(config.model_dump(mode="python"))
    if config.local_warehouse:
        data["warehouse"] = os.path.abspath(local_path(config.warehouse))
    data["state_dir"] = str(absolute_state_dir(config.state_path))
    return json.dumps(data, default=str)
