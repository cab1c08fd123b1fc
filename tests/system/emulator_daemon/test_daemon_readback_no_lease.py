"""A read-only verifier in daemon mode holds no lease on the shared emulator, and survives its idling out.

Sensors and triggers verify every few seconds for as long as the daemon or triggerer lives; a lease
would keep the warehouse's emulator up forever. The verifier's handle lets the daemon idle out, then
finds (or starts) its successor on the next attempt.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon_helpers import TABLE, daemon_config, rows, state_of, wait_until_gone
from zerobus_orchestration.emulator.advert import ADVERT_FILE, read_advertisement
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.runtime.readback_service import ReadbackService
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes


def test_a_verifier_lets_the_daemon_idle_out_and_finds_its_successor(warehouse: Path) -> None:
    config = daemon_config(warehouse, idle_shutdown_s=1.0)
    acquire_runtime(config).write(TABLE, rows(50), source="meter")
    close_all_runtimes()  # the writer is gone: from now on only the verifier uses the daemon

    service = ReadbackService.from_config(config)
    try:
        first = service.verify(TABLE, source="meter", wait_s=30)
        assert first.status is ReadbackStatus.VERIFIED, first.message
        advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
        assert advert is not None
        assert wait_until_gone(advert.pid, 30), "a verifier must not keep the shared emulator alive"

        second = service.verify(TABLE, source="meter", wait_s=30)
        assert second.status is ReadbackStatus.VERIFIED, second.message
        successor = read_advertisement(state_of(warehouse) / ADVERT_FILE)
        assert successor is not None and successor.pid != advert.pid
    finally:
        service.close()
