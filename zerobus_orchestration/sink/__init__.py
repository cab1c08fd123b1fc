"""The sink: ack lanes, the per-table stream pool, typed confirmations and ``ZerobusSink``."""

from zerobus_orchestration.sink.ack_lane import AckLane, LaneState, LaneTelemetry, LaneUnavailable
from zerobus_orchestration.sink.confirmation import (
    Confirmation,
    ConfirmationLaneError,
    DerivedCoverage,
    LaneKind,
    NoConfirm,
    PendingAck,
    RawAnchor,
    RecordingCoverage,
)
from zerobus_orchestration.sink.gate import SchemaGate
from zerobus_orchestration.sink.health import PoolHealth, StreamHealth
from zerobus_orchestration.sink.pool import (
    CoverageNotRecordedError,
    DeliveryFailedError,
    PoisonedBatchError,
    PoolUnavailableError,
    StreamPool,
    SubmitFailedError,
    Submitted,
)
from zerobus_orchestration.sink.sink import CommitInfo, OffsetSpan, PartialSendError, Receipt, ZerobusSink

__all__ = [
    "AckLane",
    "CommitInfo",
    "Confirmation",
    "ConfirmationLaneError",
    "CoverageNotRecordedError",
    "DeliveryFailedError",
    "DerivedCoverage",
    "LaneKind",
    "LaneState",
    "LaneTelemetry",
    "LaneUnavailable",
    "NoConfirm",
    "OffsetSpan",
    "PartialSendError",
    "PendingAck",
    "PoisonedBatchError",
    "PoolHealth",
    "PoolUnavailableError",
    "RawAnchor",
    "Receipt",
    "RecordingCoverage",
    "SchemaGate",
    "StreamHealth",
    "StreamPool",
    "SubmitFailedError",
    "Submitted",
    "ZerobusSink",
]
