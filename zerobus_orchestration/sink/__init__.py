"""The sink: ``ZerobusSink`` over a per-table ``StreamPool``, its receipts, health and errors.

Only what a caller of ``ZerobusSink`` meets is exported here; the ack lanes, typed confirmations and
the schema-gate seam are internals, imported from their modules by the code that needs them
(``docs/architecture.md`` maps them).
"""

from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.errors import (
    ConfirmationLaneError,
    CoverageNotRecordedError,
    DeliveryFailedError,
    PartialSendError,
    PoisonedBatchError,
    PoolUnavailableError,
    SubmitFailedError,
)
from zerobus_orchestration.sink.health import PoolHealth, StreamHealth
from zerobus_orchestration.sink.pool import StreamPool
from zerobus_orchestration.sink.sink import CommitInfo, Receipt, ZerobusSink

__all__ = [
    "CommitInfo",
    "ConfirmationLaneError",
    "CoverageNotRecordedError",
    "DeliveryFailedError",
    "LaneKind",
    "PartialSendError",
    "PoisonedBatchError",
    "PoolHealth",
    "PoolUnavailableError",
    "Receipt",
    "StreamHealth",
    "StreamPool",
    "SubmitFailedError",
    "ZerobusSink",
]
