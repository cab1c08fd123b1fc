"""The Airflow adapter's own errors; everything else it raises comes from the core's hierarchy.

Like the core's, they derive from ``ZerobusOrchestrationError``, so ``exc.retriable`` answers whether a
retry can help.
"""

from __future__ import annotations

from zerobus_orchestration.errors import ZerobusOrchestrationError


class ProbeError(ZerobusOrchestrationError):
    """One reachability probe failed; the message names the URL and the cause, never a secret.

    Not retriable as such: the probe is a diagnosis (a wrong URL, a refused secret, a proxy in the way)
    that the connection's owner acts on; ``probe_remote`` folds these into its answer.
    """
