"""Fixtures for the local cloud: the emulator's workspace URL driven by the real ``databricks-sdk``."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch, isolated_databricks_env: None) -> None:
    """No proxy for loopback (the SDKs tunnel even 127.0.0.1 through *_proxy), no developer profile."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy", "GRPC_PROXY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
