"""The seam between the sink and the catalog: schema declaration and the write-boundary guard.

The sink never writes DDL. Before the first write, and whenever the incoming schema differs from the
last one seen, it calls ``ensure``; the catalog creates or evolves the table and returns the declared
target schema. Every batch then passes ``check`` before anything is sent: it either raises (naming
table, column, incoming and declared type, and the fix) or returns the batch cast/aligned to the
target. Both see the stamped batch, reserved columns (``reserved.RESERVED_FIELDS``) included.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class SchemaGate(Protocol):
    def ensure(self, table: str, schema: pa.Schema) -> pa.Schema:
        """Make ``table`` able to take ``schema``; return the declared target schema. May raise."""
        ...

    def check(self, table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
        """Raise before anything is sent, or return ``batch`` cast/aligned to ``target``.

        The gate counts its own outcomes in ``zerobus_type_reconcile_total{table, kind}``; the sink
        does not count them again (one batch, one count per kind).
        """
        ...
