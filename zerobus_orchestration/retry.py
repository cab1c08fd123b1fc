"""One backoff and poll policy for every wait loop in the package.

``Backoff`` is a value: the delay before retry ``attempt`` (0-based) is ``initial_s * multiplier**attempt``
capped at ``max_s``; with ``jitter`` the delay is drawn from ``[delay * (1 - jitter), delay)`` so
clients that failed together do not retry together. Jitter only shortens a delay, so ``max_s`` stays a
true ceiling. ``poll_until`` waits for a probe to produce a value, sleeping the backoff between probes and
never sleeping past its deadline. Sleep and clock are injectable so callers' tests need no real waiting.

A small module rather than ``tenacity``: the loops here poll for a value (not retry on exceptions), the
emulator imports this too and must stay free of extra dependencies, and callers that share one seeded
random generator (the sink's reproducible jitter) pass it in as ``rng``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from zerobus_orchestration.errors import ConfigError

T = TypeVar("T")

__all__ = ["Backoff", "poll_until"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial_s`` at attempt 0, times ``multiplier`` per attempt, capped at ``max_s``.

    Invalid parameters raise ``ConfigError`` naming the field.
    """

    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.initial_s < 0:
            raise ConfigError(f"Backoff: initial_s must be >= 0, got {self.initial_s}")
        if self.max_s < self.initial_s:
            raise ConfigError(f"Backoff: max_s ({self.max_s}) must be >= initial_s ({self.initial_s})")
        if self.multiplier < 1.0:
            raise ConfigError(f"Backoff: multiplier must be >= 1, got {self.multiplier}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(f"Backoff: jitter is a fraction in [0, 1], got {self.jitter}")

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Wait before retry ``attempt`` (0-based); ``rng`` draws the jitter (default: module RNG)."""
        if attempt < 0:
            raise ConfigError(f"Backoff.delay: attempt must be >= 0, got {attempt}")
        ceiling = self.initial_s
        # Multiply step by step and stop at the cap: ``multiplier**attempt`` overflows for long waits.
        for _ in range(attempt):
            if ceiling >= self.max_s:
                break
            ceiling *= self.multiplier
        ceiling = min(ceiling, self.max_s)
        if not self.jitter:
            return ceiling
        draw = (rng or random).random()
        return ceiling * (1.0 - self.jitter + self.jitter * draw)

    def delays(self, *, rng: random.Random | None = None) -> Iterator[float]:
        """The endless sequence ``delay(0), delay(1), ...``."""
        attempt = 0
        while True:
            yield self.delay(attempt, rng=rng)
            attempt += 1


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T | None:
    """Call ``probe`` until it returns non-None (returned) or ``timeout_s`` elapses (``None``).

    The probe runs at least once, and once more at the deadline: a sleep is cut short so it ends at
    the deadline rather than past it, and the answer available then still counts.
    """
    deadline = clock() + timeout_s
    for delay in backoff.delays():
        result = probe()
        if result is not None:
            return result
        remaining = deadline - clock()
        if remaining <= 0:
            return None
        sleep(min(delay, remaining))
    raise AssertionError("unreachable: Backoff.delays() is endless")  # pragma: no cover
