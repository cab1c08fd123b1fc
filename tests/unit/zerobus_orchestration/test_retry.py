"""The one backoff/poll policy: delays, caps, jitter bounds and deadlines, on a fake clock."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.retry import Backoff, poll_until


class FakeClock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def test_delay_grows_geometrically_and_caps() -> None:
    b = Backoff(initial_s=0.1, max_s=1.0)
    assert [b.delay(i) for i in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_custom_multiplier_and_constant_backoff() -> None:
    assert [Backoff(1.0, 100.0, multiplier=3.0).delay(i) for i in range(3)] == [1.0, 3.0, 9.0]
    assert [Backoff(0.05, 0.05, multiplier=1.0).delay(i) for i in range(3)] == [0.05, 0.05, 0.05]


def test_huge_attempt_does_not_overflow() -> None:
    assert Backoff(0.5, 30.0).delay(100_000) == 30.0


def test_delays_is_the_endless_sequence_of_delay() -> None:
    b = Backoff(initial_s=0.25, max_s=2.0)
    it = b.delays()
    assert [next(it) for _ in range(6)] == [b.delay(i) for i in range(6)]


@given(
    initial=st.floats(0.001, 10.0),
    cap_factor=st.floats(1.0, 100.0),
    jitter=st.floats(0.0, 1.0),
    attempt=st.integers(0, 200),
    seed=st.integers(0, 2**32),
)
def test_jitter_only_shortens_and_never_exceeds_the_cap(
    initial: float, cap_factor: float, jitter: float, attempt: int, seed: int
) -> None:
    b = Backoff(initial_s=initial, max_s=initial * cap_factor, jitter=jitter)
    ceiling = Backoff(initial_s=initial, max_s=initial * cap_factor).delay(attempt)
    d = b.delay(attempt, rng=random.Random(seed))
    assert ceiling * (1.0 - jitter) - 1e-12 <= d <= ceiling + 1e-12
    assert d <= b.max_s + 1e-12


def test_seeded_rng_reproduces_the_sinks_half_jitter_formula() -> None:
    # jitter=0.5 is ``ceiling * (0.5 + 0.5 * rng.random())``, the formula the sink used by hand.
    b = Backoff(initial_s=1.0, max_s=8.0, jitter=0.5)
    ours, theirs = random.Random(7), random.Random(7)
    for attempt in range(5):
        ceiling = min(1.0 * 2**attempt, 8.0)
        assert b.delay(attempt, rng=ours) == pytest.approx(ceiling * (0.5 + 0.5 * theirs.random()))


def test_jitter_actually_varies_delays() -> None:
    b = Backoff(initial_s=1.0, max_s=1.0, jitter=0.5)
    rng = random.Random(1)
    assert len({b.delay(0, rng=rng) for _ in range(20)}) > 1


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"initial_s": -1.0, "max_s": 1.0}, "initial_s"),
        ({"initial_s": 2.0, "max_s": 1.0}, "max_s"),
        ({"initial_s": 1.0, "max_s": 2.0, "multiplier": 0.5}, "multiplier"),
        ({"initial_s": 1.0, "max_s": 2.0, "jitter": 1.5}, "jitter"),
    ],
)
def test_invalid_backoff_is_refused_naming_the_field(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Backoff(**kwargs)


def test_negative_attempt_is_refused() -> None:
    with pytest.raises(ConfigError, match="attempt"):
        Backoff(1.0, 2.0).delay(-1)


def test_poll_until_returns_the_first_non_none_value_after_backing_off() -> None:
    fake = FakeClock()
    answers = iter([None, None, None, "ready"])
    got = poll_until(
        lambda: next(answers),
        timeout_s=10.0,
        backoff=Backoff(0.1, 0.3),
        sleep=fake.sleep,
        clock=fake.clock,
    )
    assert got == "ready"
    assert fake.sleeps == pytest.approx([0.1, 0.2, 0.3])


def test_poll_until_returns_falsy_non_none_values() -> None:
    fake = FakeClock()
    got = poll_until(lambda: 0, timeout_s=1.0, backoff=Backoff(0.1, 0.1), sleep=fake.sleep, clock=fake.clock)
    assert got == 0
    assert fake.sleeps == []


def test_poll_until_times_out_without_sleeping_past_the_deadline() -> None:
    fake = FakeClock()
    calls: list[float] = []

    def probe() -> str | None:
        calls.append(fake.now)
        return None

    got = poll_until(probe, timeout_s=1.0, backoff=Backoff(0.4, 0.4), sleep=fake.sleep, clock=fake.clock)
    assert got is None
    # 0.4 + 0.4 + 0.2 (cut short): the last probe runs exactly at the deadline, and no sleep passes it.
    assert fake.sleeps == pytest.approx([0.4, 0.4, 0.2])
    assert calls == pytest.approx([100.0, 100.4, 100.8, 101.0])
    assert fake.now == pytest.approx(101.0)


def test_poll_until_with_zero_timeout_probes_once() -> None:
    fake = FakeClock()
    calls: list[int] = []

    def probe() -> int | None:
        calls.append(1)
        return None

    assert (
        poll_until(probe, timeout_s=0.0, backoff=Backoff(1.0, 1.0), sleep=fake.sleep, clock=fake.clock)
        is None
    )
    assert calls == [1]
    assert fake.sleeps == []


def test_poll_until_lets_probe_exceptions_propagate() -> None:
    fake = FakeClock()

    def probe() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        poll_until(probe, timeout_s=5.0, backoff=Backoff(0.1, 0.1), sleep=fake.sleep, clock=fake.clock)
