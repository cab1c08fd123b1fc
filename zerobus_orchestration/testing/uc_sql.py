"""The fake's SQL: the emulator's Unity Catalog statement engine, re-exported (see ``emulator/unity/sql``)."""

from __future__ import annotations

from zerobus_orchestration.emulator.unity.sql import ResultSet, SqlEngine

__all__ = ["ResultSet", "SqlEngine"]
