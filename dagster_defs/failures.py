"""Zerobus errors as Dagster step failures: what no retry can fix fails the step for good.

Refused client credentials, a table the service refuses and an emulator daemon that exited for good
(``NeedsOperatorError``) fail the same way on every retry until someone acts, so they become
``dg.Failure(allow_retries=False)``: an asset's ``RetryPolicy`` does not re-run the step
(docs/architecture.md#dagster). Every other error is raised as it is, and a retry policy may retry it
(``exc.retriable`` says whether that can help).
"""

import dagster as dg

from zerobus_orchestration.errors import needing_operator


def for_good(exc: BaseException) -> dg.Failure | None:
    """The non-retriable step failure for ``exc`` (or what caused it), None when a retry may help."""
    operator = needing_operator(exc)
    if operator is None:
        return None
    metadata: dict[str, str] = {"zerobus/error": type(operator).__name__}
    for fact in _FACTS:  # what names the refused thing (never a secret: the errors carry none)
        value = getattr(operator, fact, None)
        if value is not None:
            metadata[fact] = str(value)
    return dg.Failure(description=str(operator), metadata=metadata, allow_retries=False)


# CredentialsRefusedError's, TableUnavailableError's and EmulatorExitedError's fields.
_FACTS = ("client_id", "token_url", "table", "pid", "log")
