"""Shared settings for the runtime tests."""

from __future__ import annotations

from pathlib import Path

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.testing.settings import embedded_test_config


def fast_config(warehouse: Path) -> ZerobusConfig:
    """The embedded default with short emulator lags and SDK timeouts, for tests."""
    return embedded_test_config(warehouse)


RESUME_CAPACITY = 8  # pending acks per stream: bounds what a killed writer can leave in flight


def resume_config(warehouse: Path) -> ZerobusConfig:
    """A small ack channel, so the rows in flight when a writer dies are few and countable."""
    return embedded_test_config(warehouse, pool={"ack_channel_capacity": RESUME_CAPACITY})
