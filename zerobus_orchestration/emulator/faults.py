"""Fault injection: declarative, counted faults applied to the next matching streams.

Every fault fires on at most ``streams`` stream connections (default one) and is then spent. ``stream``
aims it at one stream of a table: the table's connections are numbered from 0 in the order they are
opened (each open that passed authentication and the table check, reconnects and refused opens
included), and the fault skips those before ``stream``. A pool opens its members one after the other,
so ``stream=1`` is its second member's first stream. Failing
every fresh connection would drive the official SDK into its reconnect hot loop (the retry budget
resets after each successful reopen), so open-ended faults are
deliberately not expressible.

Kinds, each counted from the stream's accepted batches (``after_batches``):

* ``abort``: batches 1..N are accepted and acknowledged; batch N+1 is dropped and the stream ends with
  ``status`` (``UNAVAILABLE`` is recovered by the SDK, ``INVALID_ARGUMENT`` is poison).
* ``rotate``: after batch N the server asks the client to rotate (``CloseStreamSignal`` /
  ``close_stream_duration_ms`` = ``grace_ms``).
* ``withhold_acks``: batches after N are written durably but never acknowledged on this stream.
* ``delay_acks``: acknowledgements after batch N are sent ``delay_s`` late (each one: they are not
  coalesced while the fault lasts), after the batch is durable.
* ``delay_durability``: a batch after N that is written to the write-ahead log and not yet durable is
  made durable (fsync'd), and so acknowledged, only ``delay_s`` later: the window in which a batch is
  submitted and not durable, which is where a client that advanced on submit instead of on the ack
  would lead the table. One group commit then covers every batch written meanwhile (those are not held
  again), and another stream of the same table can make the batches durable sooner: aim it at a table
  with one stream.
* ``delay_commit``: batches after N are made durable and acknowledged as usual, but reach the Delta table
  only ``delay_s`` after they were written: the materialiser (and ``materialize_now``, which a client
  cannot hurry past it) commits nothing from that WAL position on until then, other streams' later
  batches included (commits follow the WAL's order). The window in which acknowledged rows are not in
  the table yet, within Zerobus' time to table (docs/adr/0003-emulator-fidelity-limits.md).
* ``crash``: batch N+1 is written and fsync'd, then the process exits (``os._exit``) before acking.
* ``reject_open``: the stream is refused at open with ``status`` (e.g. ``RESOURCE_EXHAUSTED``).

Faults come from code (``Emulator.faults.add(FaultSpec(...))``), from a JSON file
(``zerobus-orch serve --faults faults.json``, a list of objects with these fields), from the TOML config
file (``[[zerobus_emulator_faults]]`` tables beside ``[zerobus]``, read by ``serve --config``) or over
HTTP (``POST /_emulator/faults`` with one such object, accepted only when the emulator was started with
``emulator.faults_enabled``: the HTTP port is reachable by every local user).

Every fault is recorded when it acts, not only when it is handed to a stream: ``acted`` (the spec, once
per action) and ``actions`` (what it did: which stream, which batch, which ack was withheld or delayed),
so a fault test can prove the fault happened. Each action is also logged.
"""

from __future__ import annotations

import json
import logging
import threading
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class FaultKind(StrEnum):
    ABORT = "abort"
    ROTATE = "rotate"
    WITHHOLD_ACKS = "withhold_acks"
    DELAY_ACKS = "delay_acks"
    DELAY_DURABILITY = "delay_durability"
    DELAY_COMMIT = "delay_commit"
    CRASH = "crash"
    REJECT_OPEN = "reject_open"


Protocol = Literal["row", "arrow"]


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind
    table: str | None = Field(None, description="catalog.schema.table it applies to; None: any table.")
    protocol: Protocol | None = Field(
        None, description="'row' (EphemeralStream) or 'arrow' (DoPut); None: both."
    )
    after_batches: int = Field(0, ge=0, description="Batches accepted on the stream before the fault acts.")
    status: str = Field("UNAVAILABLE", description="gRPC status name for abort / reject_open.")
    message: str = Field("injected fault", description="Status details text.")
    delay_s: float = Field(
        0.0,
        ge=0,
        description="Ack delay for delay_acks, durability delay for delay_durability, commit delay for "
        "delay_commit.",
    )
    grace_ms: int = Field(1000, ge=0, description="Rotation grace for rotate.")
    streams: int = Field(1, ge=1, description="How many stream connections it fires on before it is spent.")
    stream: int | None = Field(
        None,
        ge=0,
        description="The table's connection (numbered from 0 in open order) it starts at; None: the next.",
    )
    exit_code: int = Field(137, description="Process exit code for crash.")


_SPECS = TypeAdapter(list[FaultSpec])
log = logging.getLogger(__name__)


TOML_KEY = "zerobus_emulator_faults"


def load_faults(path: str | Path) -> list[FaultSpec]:
    """Faults from a JSON list, or from a TOML file's ``[[zerobus_emulator_faults]]`` tables.

    The TOML form lets the same file as ``--config`` (whose ``[zerobus]`` table is the package config)
    carry the emulator's faults; a TOML file without the key has no faults.
    """
    file = Path(path)
    if file.suffix == ".toml":
        with open(file, "rb") as fh:
            raw = tomllib.load(fh).get(TOML_KEY, [])
    else:
        raw = json.loads(file.read_text())
    return _SPECS.validate_python(raw)


@dataclass(frozen=True)
class FaultAction:
    """One time a fault took effect: on which table and stream, and what it did."""

    spec: FaultSpec
    table: str
    stream_id: str
    detail: str  # e.g. "withheld the ack of batch 3 (wire offset 2)"


@dataclass
class _Armed:
    spec: FaultSpec
    streams_left: int


class FaultInjector:
    """Holds armed faults and hands each new stream the ones it must suffer."""

    def __init__(self, specs: list[FaultSpec] | None = None, *, enabled: bool = False) -> None:
        """``enabled``: faults may also be armed remotely (``POST /_emulator/faults``); faults given in
        code or on the command line are armed either way (whoever starts the process chose them)."""
        self.enabled = enabled
        self._lock = threading.Lock()
        self._armed: list[_Armed] = []
        self._connections: dict[str, int] = {}  # lower-cased table -> connections armed so far
        # ``fired``: handed to a stream at open (it may never act, e.g. the client sends too few
        # batches); ``acted``: actually took effect (status sent, rotation signal sent). Tests that
        # must prove a fault happened assert on ``acted``.
        self.fired: list[FaultSpec] = []
        self.acted: list[FaultSpec] = []
        self.actions: list[FaultAction] = []
        for spec in specs or []:
            self.add(spec)

    def add(self, spec: FaultSpec) -> FaultSpec:
        with self._lock:
            self._armed.append(_Armed(spec, spec.streams))
        return spec

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def record_acted(self, spec: FaultSpec, table: str = "", stream_id: str = "", detail: str = "") -> None:
        """``spec`` took effect (called where it acts: status sent, signal sent, ack withheld...)."""
        action = FaultAction(spec, table, stream_id, detail or spec.kind.value)
        with self._lock:
            self.acted.append(spec)
            self.actions.append(action)
        log.info("injected fault %s acted on %s (stream %s): %s", spec.kind, table, stream_id, action.detail)

    def actions_of(self, kind: FaultKind) -> list[FaultAction]:
        """Every recorded action of faults of ``kind``, oldest first."""
        with self._lock:
            return [a for a in self.actions if a.spec.kind is kind]

    def pending(self) -> list[FaultSpec]:
        with self._lock:
            return [a.spec for a in self._armed]

    def arm(self, table: str, protocol: Protocol) -> list[FaultSpec]:
        """The faults the stream now opening on ``table`` gets; each use spends one of its ``streams``."""
        armed: list[FaultSpec] = []
        with self._lock:
            index = self._connections.get(table.lower(), 0)
            self._connections[table.lower()] = index + 1
            for entry in self._armed:
                spec = entry.spec
                if spec.table is not None and spec.table.lower() != table.lower():
                    continue
                if spec.protocol is not None and spec.protocol != protocol:
                    continue
                if spec.stream is not None and index < spec.stream:
                    continue
                entry.streams_left -= 1
                armed.append(spec)
                self.fired.append(spec)
            self._armed = [e for e in self._armed if e.streams_left > 0]
        return armed
