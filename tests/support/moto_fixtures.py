"""Session-wide moto server (own process, IAM enforced after bootstrap); a plugin loaded by tests/conftest.py.

Tests share the server, so each uses its own table names (``unique_table``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from zerobus_orchestration.testing.moto_s3 import MotoServer, S3Lab, bootstrap_lab


@pytest.fixture(scope="session")
def moto_lab() -> Iterator[S3Lab]:
    with MotoServer() as server:
        yield bootstrap_lab(server, bucket="lake")


@pytest.fixture
def unique_table() -> str:
    return f"main.raw.t_{uuid.uuid4().hex[:10]}"
