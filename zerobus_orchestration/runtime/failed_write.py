"""What a write that failed after sending part of its input says it delivered, and how a retry goes on.

Re-readable input is checked whole before its first row is sent (``sink/input_check.py``), so bad data
refuses it with nothing sent. A stream (a ``RecordBatchReader``, an iterator, an asset's generator) is
read once, as it is sent: a bad batch late in it stops the write after the earlier batches went out.
Those rows are not lost nor half-written: they are durable, recorded in coverage, and a retry of the
same input with ``resume=True`` (the default) skips their positions and sends only the rest, so
nothing is sent twice. The failure says so: ``explained`` waits until the batches this write sent are
durable, then restates the error (its type and fields kept, ``errors.restated``) with how many rows
were delivered and at which positions, and sets ``rows_delivered`` and ``delivered`` (the partition's
durable position ranges) on it for callers that branch on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from zerobus_orchestration.errors import restated
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.sink.sink import ZerobusSink

E = TypeVar("E", bound=BaseException)


def explained(
    exc: E, sink: ZerobusSink, covered: Callable[[], tuple[OffsetRange, ...]], *, resume: bool
) -> E:
    """``exc`` restated with what the write delivered before it, if it sent anything; else ``exc``."""
    sent = sink.finish()[0].rows
    if not sent:
        return exc
    durable_note = ""
    try:
        sink.flush()  # what this write sent before the failure: durable, or failed in its own right
    except Exception as failure:
        durable_note = f" (not all of them are durable: {failure}; coverage holds only the durable ones)"
    ranges = covered()
    held = sum(r.end - r.start for r in ranges)
    spans = ", ".join(f"{r.start:,} .. {r.end:,}" for r in ranges[:5]) + (" ..." if len(ranges) > 5 else "")
    retry = (
        "A retry of the same input resumes after them (resume=True, the default): it sends only the rows "
        "not yet delivered, none twice."
        if resume
        else "This write ran with resume=False: a retry with resume=True (the default) skips them and "
        "sends only the rest; another resume=False run sends them again."
    )
    text = (
        f"{exc}\nDelivered before the failure: {sent:,} row(s) of this write{durable_note}; its partition "
        f"{sink.partition!r} now holds {held:,} row(s), at positions {spans or '-'}. {retry}"
    )
    again = restated(exc, text)
    again.rows_delivered = held  # type: ignore[attr-defined]
    again.delivered = ranges  # type: ignore[attr-defined]
    return again
