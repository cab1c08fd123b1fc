"""The fake's table store: the emulator's Unity Catalog metastore, re-exported (``emulator/unity``)."""

from __future__ import annotations

from zerobus_orchestration.emulator.unity.metastore import Metastore

__all__ = ["Metastore"]
