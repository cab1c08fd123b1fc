"""The seam between the sink and the catalog: schema declaration and the write-boundary guard.

The sink never writes DDL. Before the first write, and whenever the incoming schema differs from the
last one seen, it calls ``ensure``; the catalog creates or evolves the table and returns the declared
target schema. Every batch then passes ``conform`` before anything is sent: it either raises (naming
table, column, incoming and declared type, and the fix) or returns the batch cast/aligned to the
target. Both see the stamped batch, reserved columns (``reserved.RESERVED_FIELDS``) included.

Standing table preconditions (primary-raw eligibility) are the gate's to re-check, never to repair:
``ensure`` checks them on the first batch of every sink (so on every ``ZerobusRuntime.write``) and
``conform`` on a timer for long-lived sinks; both raise before the batch is sent.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class SchemaGate(Protocol):
    def ensure(self, table: str, schema: pa.Schema, first: pa.RecordBatch | None = None) -> pa.Schema:
        """Make ``table`` able to take ``schema``; return the declared target schema. May raise.

        ``first``: the (stamped) batch of ``schema`` about to be conformed; a gate may refuse it before
        it changes the table (a first write with a bad value must not leave an empty table behind)."""
        ...

    def conform(self, table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
        """Raise before anything is sent, or return ``batch`` cast/aligned to ``target``.

        Called for every batch, so it is also where a gate re-checks standing preconditions on a
        timer (``CatalogGate``: a monotonic-clock comparison per batch, a catalog read when due).

        The gate counts its own outcomes in ``zerobus_type_reconcile_total{table, kind}``; the sink
        does not count them again (one batch, one count per kind).
        """
        ...
