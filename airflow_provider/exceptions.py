"""The Airflow adapter's errors: today only the core's probe error, kept importable from here.

Like the core's, they derive from ``ZerobusOrchestrationError``, so ``exc.retriable`` answers whether a
retry can help.
"""

from __future__ import annotations

# One reachability probe failed: the core's, which the runtime's start-up probe raises too.
from zerobus_orchestration.transport.reachability import ProbeError as ProbeError
