"""One batch's retry budget at submit: how often, and how long apart, a refused submit is tried again.

A transient failure or a concurrency reject is retried up to ``pool.transient_retries`` times, backed
off (a concurrency reject through the supervisor's pool-wide backoff, since the member is rebuilt). A
submit that poisons its stream rebuilds that stream each time, so it gets ``pool.poisoned_submit_attempts``
tries within ``rebuild_budget_s``; past either bound the batch is refused with ``SubmitFailedError``
while the pool keeps serving other batches. Sleep and clock are injectable for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.sink.errors import SubmitFailedError
from zerobus_orchestration.sink.member import Member

if TYPE_CHECKING:
    from zerobus_orchestration.sink.supervisor import Supervisor

log = logging.getLogger("zerobus_orchestration.sink.pool")  # logged as the pool's, where the submit runs


class SubmitRetry:
    """Counts one batch's failed submits and waits (or refuses) before the next try."""

    def __init__(
        self,
        table: str,
        config: PoolConfig,
        supervisor: Supervisor,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = table
        self._config = config
        self._supervisor = supervisor
        self._sleep = sleep
        self._clock = clock
        self.refused = 0
        self.poisoned = 0
        self._first_poisoned_at = 0.0

    def after_failure(self, member: Member, error: Exception, error_class: ErrorClass) -> None:
        """Wait before the batch's next try, or raise ``SubmitFailedError`` once its budget is spent."""
        if error_class is ErrorClass.POISON:
            self.poisoned += 1
            if self.poisoned == 1:
                self._first_poisoned_at = self._clock()
            self._after_poisoned(error)
        else:
            self.refused += 1
            self._after_refused(member, error, error_class)

    def _after_refused(self, member: Member, error: Exception, error_class: ErrorClass) -> None:
        """A transient failure leaves the stream as it is: the same member is tried again after the
        backoff. A concurrency reject means the SDK gave up the stream (its reconnects were refused):
        the member is rebuilt after the pool-wide backoff (honouring the service's retry hint), and the
        batch goes to whichever member serves first."""
        cfg, attempts = self._config, self.refused
        if attempts > cfg.transient_retries:
            raise SubmitFailedError(
                f"{self._table}: submitting one batch failed {attempts} time(s) with {error_class} errors "
                f"(last error: {error}); fix: check the service's status and quotas, or raise "
                "pool.transient_retries, then push the batch again",
                table=self._table,
                attempts=attempts,
            ) from error
        if error_class is ErrorClass.CONCURRENCY_REJECT:
            self._supervisor.back_off(member, error, error_class, what="submitting on")
            return
        delay = self._supervisor.hinted(self._supervisor.jittered(attempts), error)
        log.warning(
            "%s: submit on stream %d failed (%s, attempt %d of %d), retry in %.2fs: %s",
            self._table,
            member.index,
            error_class,
            attempts,
            cfg.transient_retries,
            delay,
            error,
        )
        self._sleep(delay)

    def _after_poisoned(self, error: Exception) -> None:
        """Each poisoned submit rebuilds a stream, so an unbounded retry is a reopen storm: spaced by the
        open backoff (jittered), never past ``rebuild_budget_s`` since the first."""
        cfg, attempts = self._config, self.poisoned
        elapsed = self._clock() - self._first_poisoned_at
        if attempts >= cfg.poisoned_submit_attempts or elapsed >= cfg.rebuild_budget_s:
            raise SubmitFailedError(
                f"{self._table}: submitting one batch poisoned {attempts} stream(s) in {elapsed:.2f}s "
                f"(last error: {error}); not retried further, so as not to reopen streams in a loop. "
                "Fix: check the batch against the table's schema and the service limits (record size, "
                "column values), then push it again; other batches keep flowing",
                table=self._table,
                attempts=attempts,
            ) from error
        delay = min(self._supervisor.jittered(attempts), cfg.rebuild_budget_s - elapsed)
        log.warning(
            "%s: submit poisoned a stream (%d of %d attempts for this batch), retry in %.2fs: %s",
            self._table,
            attempts,
            cfg.poisoned_submit_attempts,
            delay,
            error,
        )
        self._sleep(max(delay, 0.0))
