"""The pool's supervisor thread: every stream open, rebuild, backoff and salvage happens here.

Pushers never open a stream. They mark a member REBUILDING (or a lane reports its stream failed) and
notify; the supervisor then retires the old lane (collecting what it did not confirm), opens a new
stream, re-submits the collected batches on it and puts the member back in service, within
``rebuild_budget_s`` while the other members keep serving.

Refused opens are retried with exponential backoff and jitter shared by the whole pool, so repeated
concurrency rejects can never turn into a reopen storm. A stream the service stops with a concurrency
reject mid-stream (its SDK reconnects refused) waits out the same backoff before it is re-opened, never
at once; a retry hint in the service's status is a floor on every such wait. A member whose rebuilt
stream fails again before delivering anything waits out its own jittered backoff before the next
rebuild. A batch the service rejects at acknowledgement every time is given up (its receipt fails,
``flush`` raises) once ``poisoned_submit_attempts`` streams died at it or ``rebuild_budget_s`` passed
since the first did; the batches behind it are re-sent. A member that failed beyond repair for a cause
a retry can fix is re-opened after ``failed_member_cooldown_s``; fatal and schema-rejected members stay
failed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.retry import Backoff
from zerobus_orchestration.sink.ack_lane import AckLane, LaneObserver, LaneState, lane_capacity
from zerobus_orchestration.sink.confirmation import LaneKind, PendingAck, span_of
from zerobus_orchestration.sink.errors import PoisonedBatchError, RebuildBudgetExceededError
from zerobus_orchestration.sink.lane_telemetry import LaneTelemetry
from zerobus_orchestration.sink.member import Member, MemberState
from zerobus_orchestration.transport.classify import classify, retry_delay_s

_FOR_GOOD = (ErrorClass.FATAL, ErrorClass.SCHEMA_REJECTED)  # what no re-open can fix

if TYPE_CHECKING:
    import pyarrow as pa

    from zerobus_orchestration.config import PoolConfig
    from zerobus_orchestration.metrics import SinkMetrics
    from zerobus_orchestration.ranges import CoverageRecorder
    from zerobus_orchestration.transport.base import Stream, Transport

log = logging.getLogger("zerobus_orchestration.sink.pool")  # one logger for the pool and its thread


def backoff_ceiling(initial_s: float, max_s: float, failures: int) -> float:
    """``min(max_s, initial_s * 2 ** (failures - 1))``, without overflowing after very many failures."""
    return Backoff(min(initial_s, max_s), max_s).delay(max(failures - 1, 0))


class SupervisedPool(LaneObserver, Protocol):
    """What the supervisor needs of its pool (``StreamPool``), and nothing more.

    ``changed`` is the pool's condition: notified (``notify``) whenever a member changes state, a
    submit fails or the pool closes; the supervisor waits on it between passes. The pool is the observer
    of every lane the supervisor starts (``on_lane_failed``).
    """

    table: str
    config: PoolConfig
    metrics: SinkMetrics
    transport: Transport
    lane_kind: LaneKind
    recorder: CoverageRecorder | None

    @property
    def members(self) -> Sequence[Member]: ...
    @property
    def changed(self) -> threading.Condition: ...
    @property
    def schema(self) -> pa.Schema | None: ...
    @property
    def closing(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def notify(self) -> None: ...
    def healthy_count(self) -> int: ...
    def lane_telemetry(self, member: Member) -> LaneTelemetry: ...


class Supervisor:
    """Repairs one pool's members on its own thread. Shares the pool's condition, members and schema."""

    def __init__(self, pool: SupervisedPool, *, seed: int | None = None) -> None:
        self._pool = pool
        self._rng = random.Random(seed)  # seeded: a test can replay the pool's jitter
        cfg = pool.config
        self.backoff = Backoff(
            min(cfg.open_backoff_initial_s, cfg.open_backoff_max_s), cfg.open_backoff_max_s, jitter=0.5
        )
        """Jittered down to half, so pools never retry in lock-step (attempt n: after n+1 failures)."""
        self.open_not_before = 0.0
        """Pool-wide: no member opens a stream before this (``time.monotonic()``)."""
        self._consecutive_rejects = 0
        self._consecutive_errors = 0
        self._thread: threading.Thread | None = None
        self.concurrency_rejects = 0
        self.open_attempts = 0
        self.open_refusals = 0
        self.last_refusal: BaseException | None = None
        self.errors = 0
        self.last_error: str | None = None
        self.last_open_backoff_s: float | None = None
        """The most recent backoff before the next open (after a refusal), retry hint included."""

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"zerobus-pool-{self._pool.table}", daemon=True
        )
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def hinted(self, delay: float, error: BaseException) -> float:
        """``delay``, or the service's retry hint if longer (capped at ``rebuild_budget_s``)."""
        hint = retry_delay_s(error)
        if hint is None:
            return delay
        return max(delay, min(hint, self._pool.config.rebuild_budget_s))

    def jittered(self, failures: int) -> float:
        """The backoff after ``failures`` (>= 1) in a row, jittered with the pool's seeded generator."""
        return self.backoff.delay(max(failures - 1, 0), rng=self._rng)

    # -- the loop -------------------------------------------------------------------------------------

    def _run(self) -> None:
        pool = self._pool
        while True:
            with pool.changed:
                if pool.closed:
                    return
                now = time.monotonic()
                due = [m for m in pool.members if m.needs_supervisor(now, closing=pool.closing)]
                if not due or now < self.open_not_before:
                    wake = [self.open_not_before] if due else []
                    if not pool.closing:
                        wake += [
                            m.reopen_at
                            for m in pool.members
                            if m.state is MemberState.FAILED and m.reopen_at is not None
                        ]
                    wake += [
                        m.open_not_before
                        for m in pool.members
                        if m.state is MemberState.REBUILDING and m.open_not_before > now
                    ]
                    timeout = min(wake) - now if wake else None
                    pool.changed.wait(timeout if timeout is None else max(timeout, 0.001))
                    continue
            for member in due:
                try:
                    self._repair(member)
                except Exception as exc:  # never let one bad pass kill the only thread that repairs
                    self._error(member, exc)
                else:
                    self._consecutive_errors = 0
                if time.monotonic() < self.open_not_before:
                    break  # a reject: every pending open waits out the same backoff

    def _repair(self, member: Member) -> None:
        pool, cfg = self._pool, self._pool.config
        if member.state is MemberState.FAILED and not self._reopen(member):
            return
        if member.state is MemberState.REBUILDING and not self._retire(member):
            return
        if member.fatal is None and time.monotonic() < member.open_not_before:
            return  # backing off after a barren stream; the loop wakes for it at open_not_before
        if member.fatal is not None:
            self.fail_member(member, member.fatal)
            return
        started = member.rebuild_started
        if started is not None and time.monotonic() - started > cfg.rebuild_budget_s:
            self.fail_member(
                member,
                RebuildBudgetExceededError(
                    f"{pool.table}: stream {member.index} not rebuilt within rebuild_budget_s="
                    f"{cfg.rebuild_budget_s}",
                    table=pool.table,
                ),
            )
            return
        if time.monotonic() < self.open_not_before:
            return  # retiring met a refusal (a lane stopped by a concurrency reject): wait out its backoff
        schema = pool.schema
        assert schema is not None
        self.open_attempts += 1
        try:
            stream = pool.transport.open_stream(pool.table, schema)
        except Exception as exc:
            error_class = classify(exc)
            if error_class in _FOR_GOOD:
                self.fail_member(member, exc)
                return
            self.back_off(member, exc, error_class)
            return
        if self._attach(member, stream, schema):
            self._consecutive_rejects = 0  # only a usable stream ends the backoff, not a bare open

    def _error(self, member: Member, exc: Exception) -> None:
        """Log, count (health shows it), and back off before the next pass instead of spinning."""
        self.errors += 1
        self._consecutive_errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        cfg = self._pool.config  # not jittered: the cause is a bug here, not a busy service
        ceiling = backoff_ceiling(
            cfg.open_backoff_initial_s, cfg.open_backoff_max_s, self._consecutive_errors
        )
        self.open_not_before = max(self.open_not_before, time.monotonic() + ceiling)
        log.exception(
            "%s: unexpected error repairing stream %d (%d so far); supervisor keeps running, next pass in "
            "%.2fs",
            self._pool.table,
            member.index,
            self.errors,
            ceiling,
        )
        self._pool.notify()

    # -- backoff --------------------------------------------------------------------------------------

    def back_off(
        self, member: Member, exc: BaseException, error_class: ErrorClass, what: str = "opening"
    ) -> None:
        """A refused open (or a stream stopped by a refusal): every open waits out one pool-wide backoff."""
        pool = self._pool
        if error_class is ErrorClass.CONCURRENCY_REJECT:
            self.concurrency_rejects += 1
            pool.metrics.concurrency_rejects.labels(
                table=pool.table, stream=str(member.index), lane=str(pool.lane_kind)
            ).inc()
        self.open_refusals += 1
        self.last_refusal = exc  # what a pusher that waited in vain is told
        self._consecutive_rejects += 1
        # The service's retry hint, if any, is a floor.
        delay = self.hinted(self.jittered(self._consecutive_rejects), exc)
        self.open_not_before = max(self.open_not_before, time.monotonic() + delay)
        self.last_open_backoff_s = delay
        log.warning(
            "%s: %s stream %d refused (%s), retry in %.2fs; %d healthy member(s) keep sending: %s",
            pool.table,
            what,
            member.index,
            error_class,
            delay,
            pool.healthy_count(),
            exc,
        )
        pool.notify()  # a first write waiting in _await_first_open may go ahead on the healthy members

    def _pace_rebuild_locked(self, member: Member, *, barren: bool) -> None:
        """Back off before re-opening a member whose streams keep failing without delivering anything.

        Each successful open used to clear the pool's backoff, so a service failing every new stream
        would be met with a tight reopen loop; jittered like the open backoff.
        """
        delay = member.pace_rebuild(barren=barren, now=time.monotonic(), delay=self.jittered)
        if delay is not None:
            log.warning(
                "%s: stream %d failed %d time(s) in a row without delivering anything; next rebuild in %.2fs",
                self._pool.table,
                member.index,
                member.barren_failures,
                delay,
            )

    # -- opening, salvage, failure --------------------------------------------------------------------

    def _reopen(self, member: Member) -> bool:
        """Turn a member failed for a non-fatal cause into a fresh one (a still-refusing service fails it
        again and it waits out another cool-down: no storm)."""
        with member.lock:
            if not member.reopen(time.monotonic()):
                return False
        log.info(
            "%s: re-opening stream %d after its cool-down (#%d)",
            self._pool.table,
            member.index,
            member.reopens,
        )
        return True

    def _retire(self, member: Member) -> bool:
        """Stop a rebuilding member's old lane and collect what it did not confirm."""
        lane, stream = member.lane, member.stream
        if lane is None:
            return True
        lane.stop(timeout=self._pool.config.rebuild_budget_s)
        if lane.thread_alive:
            return False  # still waiting on the old stream; try again on the next pass
        kept = lane.take_unconfirmed()
        failed = lane.state is LaneState.FAILED
        with member.lock:
            if failed and member.fatal is None and lane.error_class in _FOR_GOOD:
                # The lane saw why its stream died (refused credentials, a refused table) after a submit
                # had already marked the member rebuilding for the SDK's bare "stream is closed": no
                # re-open, which the service would refuse the same way after the SDK's own retries.
                member.fatal = lane.error
            member.retire(lane, kept)
            dropped = self._drop_rejected_locked(member) if lane.error is not None else []
            if failed:
                self._pace_rebuild_locked(member, barren=lane.confirmed == 0)
        self._give_up(member, dropped, lane.error)
        if stream is not None:
            if failed:
                # A dead stream's close may hang (it flushes first); its batches are collected, so it
                # must not hold the supervisor, which repairs every member.
                threading.Thread(
                    target=self._close_quietly, args=(stream,), name="zerobus-close-dead", daemon=True
                ).start()
            else:
                self._close_quietly(stream)
        return True

    def _close_quietly(self, stream: Stream) -> None:
        try:
            stream.close()
        except Exception as exc:  # a dead stream may refuse to close; its batches were collected
            log.info("%s: closing failed stream %s: %s", self._pool.table, stream.stream_id, exc)

    def _attach(self, member: Member, stream: Stream, schema: pa.Schema) -> bool:
        """Start ``stream``'s lane and re-submit what the member's old stream left; False if that failed.

        ``schema`` is what ``stream`` was opened with. If ``ensure_open`` moved the pool to a new schema
        while the open was in flight, the stream is not put in service: it takes its re-submits (batches of
        its own schema), then is drained and re-opened with the new schema, like every other member.
        """
        pool, cfg = self._pool, self._pool.config
        telemetry = pool.lane_telemetry(member)
        lane = AckLane(
            stream,
            kind=pool.lane_kind,
            capacity=lane_capacity(cfg.ack_channel_capacity, stream),
            telemetry=telemetry,
            recorder=pool.recorder,
            observer=pool,
            transient_retries=cfg.transient_retries,
            delivered=member.delivered_base,
            salvage_timeout_s=cfg.rebuild_budget_s,
        ).start()
        with member.lock:
            pending = member.attach(stream, lane, schema)
            resubmit_error: Exception | None = None
            dropped: list[PendingAck] = []
            stale = False
            for index, item in enumerate(pending):
                try:
                    offset = stream.submit(item.batch)
                except Exception as exc:
                    if index == 0 and classify(exc) is ErrorClass.POISON:
                        # The first batch on a fresh stream, refused at submit rather than at its ack: the
                        # same batch to blame, the same bound. A later refusal may come from an earlier
                        # batch killing the stream; the lane blames that one when it collects them.
                        item = item.poisoned(time.monotonic())
                    member.resubmit_refused([item, *pending[index + 1 :]])
                    resubmit_error = exc
                    dropped = self._drop_rejected_locked(member)
                    break
                lane.put_resubmitted(item.moved_to(offset))
                member.resubmitted_rows += item.rows  # counted in rows_possibly_resent
            else:
                if member.serve():
                    pool.metrics.stream_rebuilds.labels(
                        table=pool.table, stream=str(member.index), lane=str(pool.lane_kind)
                    ).inc()
                # Checked under the member lock: ``ensure_open`` assigns the schema before it marks
                # HEALTHY members (under this lock) for re-opening, so no stale stream is left serving.
                stale = pool.schema is not schema
                if stale:
                    member.start_reopen(time.monotonic())
        if stale:
            log.info(
                "%s: stream %d (%s) was opened with the previous schema; draining and re-opening it",
                pool.table,
                member.index,
                stream.stream_id,
            )
            pool.notify()
            return True
        if resubmit_error is not None:
            self._give_up(member, dropped, resubmit_error)
            # Backed off like a refused open: re-opening at once would meet the same failure, in a loop.
            self.back_off(member, resubmit_error, classify(resubmit_error), what="re-submitting on new")
            return False
        log.info(
            "%s: stream %d open (%s)%s",
            pool.table,
            member.index,
            stream.stream_id,
            f", {len(pending)} unacknowledged batch(es) re-submitted" if pending else "",
        )
        pool.notify()
        return True

    def fail_member(self, member: Member, error: BaseException) -> None:
        # The pool lives as long as the process: a member lost to a passing outage must come back, or
        # every later write to the table fails. What a retry cannot fix (auth, config, schema) stays failed.
        pool, cooldown_s = self._pool, self._pool.config.failed_member_cooldown_s
        recoverable = classify(error) not in _FOR_GOOD
        with member.lock:
            pending = member.fail(error, reopen_at=time.monotonic() + cooldown_s if recoverable else None)
        for item in pending:
            item.settle(error)
        log.error(
            "%s: stream %d failed beyond repair, %d batch(es) not delivered%s: %s",
            pool.table,
            member.index,
            len(pending),
            f"; re-opening it in {cooldown_s}s" if recoverable else "",
            error,
        )
        pool.notify()

    def _drop_rejected_locked(self, member: Member) -> list[PendingAck]:
        cfg = self._pool.config
        return member.drop_rejected(
            now=time.monotonic(), max_poisonings=cfg.poisoned_submit_attempts, budget_s=cfg.rebuild_budget_s
        )

    def _give_up(self, member: Member, dropped: list[PendingAck], cause: BaseException | None) -> None:
        """Fail the receipts of batches ``Member.drop_rejected`` took out, naming table, cause and fix."""
        if not dropped:
            return
        table = self._pool.table
        now = time.monotonic()
        last: PoisonedBatchError | None = None
        for item in dropped:
            span = span_of(item.confirmation)
            since = now - (item.first_poisoned_at or now)
            last = PoisonedBatchError(
                f"{table}: one batch ({item.rows} row(s)"
                f"{f', positions [{span.start}, {span.end})' if span is not None else ''}) "
                f"was rejected at acknowledgement by {item.poisonings} stream(s) in {since:.2f}s "
                f"(last error: {cause}); it is not re-sent, so as not to reopen streams in a loop, and "
                "coverage excludes it. Fix: check the batch against the table's schema and the service "
                "limits (record size, column values), then send it again; the other batches keep flowing",
                table=table,
                span=span,
                rows=item.rows,
                poisonings=item.poisonings,
            )
            last.__cause__ = cause
            item.settle(last)
        with member.lock:
            member.last_loss = last
        log.error(
            "%s: stream %d: %d batch(es) given up after the service kept rejecting them: %s",
            table,
            member.index,
            len(dropped),
            cause,
        )
