"""Reach what a remote ``zerobus`` connection points at, for ``test_connection`` (the UI button and
``airflow connections test``).

The probes are the core's (``zerobus_orchestration.transport.reachability``, which the runtime also
runs when it starts on a remote endpoint); this module keeps the hook's import path.
"""

from __future__ import annotations

from zerobus_orchestration.transport.reachability import (
    DEFAULT_TIMEOUT_S,
    TOKEN_PATH,
    fetch_token,
    probe_remote,
    reach_endpoint,
)

__all__ = ["DEFAULT_TIMEOUT_S", "TOKEN_PATH", "fetch_token", "probe_remote", "reach_endpoint"]
