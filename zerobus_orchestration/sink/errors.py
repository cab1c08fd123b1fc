"""The sink layer's errors: what the pool, the ack lanes and ``ZerobusSink`` raise.

All derive from ``ZerobusOrchestrationError`` (so ``exc.retriable`` says whether a retry can help) and
keep ``RuntimeError`` / ``TypeError`` as a second base, which callers may already catch. The facts a
caller branches on (table, positions, counts) are fields; every field defaults to None so a raise site
that does not know one still works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zerobus_orchestration.errors import ErrorClass, ZerobusOrchestrationError
from zerobus_orchestration.transport.classify import classify

if TYPE_CHECKING:
    from zerobus_orchestration.ranges import OffsetRange
    from zerobus_orchestration.sink.sink import Receipt


class ConfirmationLaneError(ZerobusOrchestrationError, TypeError):
    """A confirmation was handed to a stream of the other lane kind (a programming error: not retriable).

    ``lane``: the stream's lane kind; ``key``: the coverage key the confirmation carried.
    """

    def __init__(self, message: str, *, lane: str | None = None, key: object = None) -> None:
        super().__init__(message)
        self.lane = lane
        self.key = key


class LaneUnavailable(ZerobusOrchestrationError, RuntimeError):
    """The lane no longer accepts batches (its stream failed or it was stopped); pick another member.

    Control flow between a lane and its pool: the pool catches it and selects again, so it does not
    reach users. Transient by nature: another member (or the rebuilt one) takes the batch.
    """

    error_class = ErrorClass.TRANSIENT


class PoolUnavailableError(ZerobusOrchestrationError, RuntimeError):
    """No healthy stream became available within ``healthy_member_wait_s``; ``table`` names the target."""

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


class RebuildBudgetExceededError(PoolUnavailableError):
    """A stream could not be rebuilt within ``rebuild_budget_s`` (opens kept being refused).

    Not fatal: the service may accept opens again, so the supervisor re-opens the member after
    ``failed_member_cooldown_s``. Batches lost with it stay failed.
    """

    error_class = ErrorClass.TRANSIENT


class DeliveryFailedError(ZerobusOrchestrationError, RuntimeError):
    """Some batches could not be delivered (their stream failed beyond repair); coverage excludes them.

    ``table``: the target; ``failed_batches``: how many batches were lost (None if not counted).
    """

    def __init__(self, message: str, *, table: str | None = None, failed_batches: int | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.failed_batches = failed_batches


class CoverageNotRecordedError(ZerobusOrchestrationError, RuntimeError):
    """Batches were delivered durably, but recording their coverage failed: a resume would re-send them.

    ``table``: the target; ``batches``: how many delivered batches have no coverage record.
    """

    def __init__(self, message: str, *, table: str | None = None, batches: int | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.batches = batches


class PoisonedBatchError(DeliveryFailedError):
    """The service kept rejecting one batch at acknowledgement; it is not re-sent any more.

    Set on that batch's receipt and counted in ``failed_batches``, so ``flush`` raises
    ``DeliveryFailedError``. The other batches of the dead streams are re-sent as usual.
    ``span``: the batch's positions (None for a batch without coverage); ``rows``: its row count;
    ``poisonings``: how many streams died at it.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        span: OffsetRange | None = None,
        rows: int | None = None,
        poisonings: int | None = None,
    ) -> None:
        super().__init__(message, table=table, failed_batches=1)
        self.span = span
        self.rows = rows
        self.poisonings = poisonings


class SubmitFailedError(ZerobusOrchestrationError, RuntimeError):
    """Fresh streams kept refusing one batch at submit; retrying it would only open more streams.

    ``table``: the target; ``attempts``: how many submits of the batch failed.
    """

    def __init__(self, message: str, *, table: str | None = None, attempts: int | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.attempts = attempts


class PartialSendError(ZerobusOrchestrationError, RuntimeError):
    """``send`` failed part-way, after some batches were already submitted.

    A streamed input's later batch failed its checks (the catalog gate and guard included), or the pool
    refused a later batch of any input. ``receipts``: the submitted batches' receipts (they are on their
    way and resolve as usual); the failing batch and everything after it were not sent. The original
    error is ``__cause__``; ``error_class`` (and so ``retriable``) is the cause's.
    """

    def __init__(self, message: str, receipts: list[Receipt], cause: BaseException) -> None:
        super().__init__(message)
        self.receipts = receipts
        self.error_class = classify(cause)
