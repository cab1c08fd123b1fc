"""Test helpers shipped with the package, so users can test their own pipelines against them.

``FakeUnityCatalog``: a local fake of the Unity Catalog + SQL Statement Execution REST subset, driven by
the real ``databricks-sdk``. Importing this package does not start anything.
"""

from __future__ import annotations

from zerobus_orchestration.emulator.unity.sql import ResultSet
from zerobus_orchestration.emulator.unity.state import FakeTable, StatementFailure
from zerobus_orchestration.testing.uc_fake import (
    CredentialIssuer,
    FakeUnityCatalog,
    IssuedCredentials,
    SyntheticIssuer,
)
from zerobus_orchestration.testing.uc_http import RecordedRequest

__all__ = [
    "CredentialIssuer",
    "FakeTable",
    "FakeUnityCatalog",
    "IssuedCredentials",
    "RecordedRequest",
    "ResultSet",
    "StatementFailure",
    "SyntheticIssuer",
]
