"""The fake's tables: the emulator's Unity Catalog table model, re-exported (see ``emulator/unity/state``)."""

from __future__ import annotations

from zerobus_orchestration.emulator.unity.state import FakeColumn, FakeTable, StatementFailure, now_ms

__all__ = ["FakeColumn", "FakeTable", "StatementFailure", "now_ms"]
