"""``pool.max_batch_bytes`` stays within what one ingest call may carry; a stream's share of the budget under
one batch is warned of."""

from __future__ import annotations

import logging

import pytest

from zerobus_orchestration.config import MAX_CALL_BYTES, PoolConfig, load_config
from zerobus_orchestration.errors import ConfigError

MiB = 1024 * 1024


def test_max_call_bytes_is_ten_mib_less_the_sdks_headroom() -> None:
    assert MAX_CALL_BYTES == 10 * MiB - 64 * 1024 == 10_420_224


def test_a_batch_limit_of_exactly_one_call_is_accepted() -> None:
    assert PoolConfig(
        max_batch_bytes=MAX_CALL_BYTES, max_inflight_bytes=4 * MAX_CALL_BYTES
    ).max_batch_bytes == (MAX_CALL_BYTES)


@pytest.mark.parametrize("value", [MAX_CALL_BYTES + 1, 10 * MiB, 200 * 1000 * 1000])
def test_a_batch_limit_over_one_call_is_refused_naming_the_setting_and_the_limit(value: int) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"ZEROBUS_POOL__MAX_BATCH_BYTES": str(value)})
    text = str(caught.value)
    assert "zerobus.pool.max_batch_bytes" in text and str(value) in text
    assert "10,420,224 bytes" in text and f"at most {MAX_CALL_BYTES}" in text


def test_the_lower_bound_keeps_its_own_message() -> None:
    with pytest.raises(
        ConfigError, match=r"zerobus\.pool\.max_batch_bytes: Input should be greater than or equal"
    ):
        load_config(pool={"max_batch_bytes": 100})


def test_the_description_states_the_per_call_limit() -> None:
    description = PoolConfig.model_fields["max_batch_bytes"].description or ""
    assert "MAX_CALL_BYTES" in description and "10,420,224" in description


WARNING = "is below pool.max_batch_bytes"


def test_a_budget_under_one_batch_is_warned_of_once_when_the_config_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="zerobus_orchestration.config"):
        config = load_config(environ={}, pool={"max_batch_bytes": 8 * MiB, "max_inflight_bytes": 2 * MiB})
    warnings = [r for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert "pool.max_inflight_bytes (2097152)" in message and "pool.max_batch_bytes (8388608)" in message
    assert "split over 2 stream(s), gives each stream 1048576 bytes" in message
    assert "one batch at a time" in message and "Raise pool.max_inflight_bytes" in message
    assert (config.pool.max_inflight_bytes, config.pool.max_batch_bytes) == (2 * MiB, 8 * MiB)  # not refused


@pytest.mark.parametrize(
    "pool",
    [
        {},
        {"max_batch_bytes": 8 * MiB, "max_inflight_bytes": 16 * MiB},
        {"min_streams": 1, "max_batch_bytes": 8 * MiB, "max_inflight_bytes": 8 * MiB},
        {"max_inflight_bytes": 64 * MiB},
    ],
)
def test_a_budget_of_at_least_one_batch_is_not_warned_of(
    caplog: pytest.LogCaptureFixture, pool: dict[str, int]
) -> None:
    with caplog.at_level(logging.WARNING, logger="zerobus_orchestration.config"):
        load_config(environ={}, pool=pool)
    assert [r for r in caplog.records if WARNING in r.getMessage()] == []
