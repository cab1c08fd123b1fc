"""Fixtures for sink tests."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from zerobus_orchestration.metrics import SinkMetrics


@pytest.fixture
def metrics() -> SinkMetrics:
    """A fresh registry per test, so label sets never collide between tests."""
    return SinkMetrics(CollectorRegistry())
