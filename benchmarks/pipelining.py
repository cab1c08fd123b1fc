"""Pipelining benchmark: ZerobusSink versus an inline wait-per-batch loop, on MemoryTransport.

For each ack latency (150 ms, the documented Zerobus p50 time to durability, and 5 ms) it measures:

- ``sink_batches_per_s``: steady-state *durable, confirmed* batches per second through ``ZerobusSink``
  (counted by the ack lanes in a window after warm-up, not by pushes);
- ``inline_batches_per_s``: ``submit`` then ``wait_for_offset`` for every batch on one stream;
- ``bound_batches_per_s``: the Little's-law bound ``in_flight_capacity / latency`` with
  ``in_flight_capacity = streams * ack_channel_capacity``: the ack channel bounds *pending acks*, so
  that many batches at most are in flight per stream, and none is durable sooner than one ack
  latency after its submit. The sink cannot beat the bound; the gap to it is per-batch Python cost
  (a refill of ``capacity`` batches and the lane's wake-up, paid once per round trip).
- ``speedup_per_stream``: sink rate over ``streams`` independent inline loops (one per stream), so a
  multi-stream sink is not flattered by a comparison with a single inline stream.

The first two scenarios size the in-flight capacity so that the bound is reachable by one pushing
thread (``meets_target``: >= 90 % of it). The third runs the *default* configuration (1 stream,
``ack_channel_capacity`` 4096): its bound (~27 k batches/s at 150 ms) is above what one Python thread
can push on this machine, so it is CPU-bound by design and reported without a target; what it shows is
the speedup over waiting per batch.

Run: ``python benchmarks/pipelining.py`` (table) or ``--json`` (one JSON object on stdout); ``--smoke``
for a tiny run that checks the benchmark works (CI), not its figures. Transport: ``MemoryTransport``, the
in-memory fake with simulated ack latency, not the official SDK.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass

import pyarrow as pa
from prometheus_client import CollectorRegistry

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

TABLE = "main.bench.events"


@dataclass(frozen=True)
class Scenario:
    latency_s: float
    streams: int
    capacity: int


@dataclass(frozen=True)
class Result:
    latency_s: float
    streams: int
    ack_channel_capacity: int
    sink_batches_per_s: float
    inline_batches_per_s: float
    bound_batches_per_s: float
    fraction_of_bound: float
    speedup_vs_inline: float
    speedup_per_stream: float
    meets_target: bool | None  # >= 90 % of the bound; None where the bound is CPU-bound by design
    coalesce_ratio_mean: float | None


# In-flight capacity is chosen per latency so that refilling it from one pushing thread stays well
# under one ack latency on a small machine; the bound scales with it either way (see --capacity).
DEFAULT_SCENARIOS = (Scenario(0.150, 2, 16), Scenario(0.005, 1, 2), Scenario(0.150, 1, 4096))
TARGET_FRACTION = 0.90
_DEFAULT_CAPACITY = PoolConfig().ack_channel_capacity  # the shipped default: reported without a target
TRANSPORT = "MemoryTransport (in-memory fake, simulated ack latency)"  # not the official SDK
SMOKE_WARMUP_S, SMOKE_WINDOW_S = 0.05, 0.2  # --smoke: every scenario still runs, briefly


def _batch(rows: int) -> pa.RecordBatch:
    return pa.record_batch({"v": pa.array(range(rows), pa.int64())})


def measure_sink(
    scenario: Scenario, warmup_s: float, window_s: float, rows: int
) -> tuple[float, float | None]:
    transport = MemoryTransport(LatencyModel(base_s=scenario.latency_s), keep_payloads=False)
    config = PoolConfig(min_streams=scenario.streams, ack_channel_capacity=scenario.capacity)
    pool = StreamPool(transport, TABLE, config, metrics=SinkMetrics(CollectorRegistry()))
    sink = ZerobusSink(pool, source="bench")
    batch = _batch(rows)
    sink.push(batch)
    sink.flush()  # the pool is open before the clock starts
    stop = threading.Event()

    def pusher() -> None:
        while not stop.is_set():
            sink.push(batch)

    thread = threading.Thread(target=pusher, daemon=True)
    thread.start()
    time.sleep(warmup_s)
    delivered_0, started = pool.health().delivered, time.monotonic()
    time.sleep(window_s)
    delivered_1, ended = pool.health().delivered, time.monotonic()
    stop.set()
    thread.join()
    coalesce = pool.health().coalesce_ratio_mean
    pool.close()
    return (delivered_1 - delivered_0) / (ended - started), coalesce


def measure_inline(latency_s: float, window_s: float, rows: int) -> float:
    transport = MemoryTransport(LatencyModel(base_s=latency_s), keep_payloads=False)
    batch = _batch(rows)
    stream = transport.open_stream(TABLE, batch.schema)
    done, started = 0, time.monotonic()
    while time.monotonic() - started < window_s:
        stream.wait_for_offset(stream.submit(batch))  # what the sink exists to avoid
        done += 1
    elapsed = time.monotonic() - started
    stream.close()
    return done / elapsed


def run(scenarios: tuple[Scenario, ...], warmup_s: float, window_s: float, rows: int) -> list[Result]:
    results = []
    for scenario in scenarios:
        sink_rate, coalesce = measure_sink(scenario, warmup_s, window_s, rows)
        inline_rate = measure_inline(scenario.latency_s, window_s, rows)
        bound = scenario.streams * scenario.capacity / scenario.latency_s
        results.append(
            Result(
                latency_s=scenario.latency_s,
                streams=scenario.streams,
                ack_channel_capacity=scenario.capacity,
                sink_batches_per_s=round(sink_rate, 1),
                inline_batches_per_s=round(inline_rate, 1),
                bound_batches_per_s=round(bound, 1),
                fraction_of_bound=round(sink_rate / bound, 3),
                speedup_vs_inline=round(sink_rate / inline_rate, 1) if inline_rate else float("inf"),
                speedup_per_stream=(
                    round(sink_rate / (inline_rate * scenario.streams), 1) if inline_rate else float("inf")
                ),
                meets_target=(
                    None if scenario.capacity >= _DEFAULT_CAPACITY else sink_rate / bound >= TARGET_FRACTION
                ),
                coalesce_ratio_mean=round(coalesce, 1) if coalesce is not None else None,
            )
        )
    return results


def render(results: list[Result]) -> str:
    header = (
        f"{'latency':>8} {'streams':>7} {'capacity':>8} {'sink b/s':>10} {'inline b/s':>10} "
        f"{'bound b/s':>10} {'of bound':>8} {'speedup':>8} {'/stream':>8} {'batches/wait':>12} {'target':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        verdict = {None: "n/a", True: "met", False: "MISSED"}[r.meets_target]
        lines.append(
            f"{r.latency_s * 1000:>6.0f}ms {r.streams:>7} {r.ack_channel_capacity:>8} "
            f"{r.sink_batches_per_s:>10.1f} {r.inline_batches_per_s:>10.1f} {r.bound_batches_per_s:>10.1f} "
            f"{r.fraction_of_bound:>8.1%} {r.speedup_vs_inline:>7.1f}x {r.speedup_per_stream:>7.1f}x "
            f"{r.coalesce_ratio_mean or 0:>12} {verdict:>7}"
        )
    lines.append(
        f"target: the sink reaches >= {TARGET_FRACTION:.0%} of the bound (n/a: default capacity, CPU-bound)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before the measuring window")
    parser.add_argument("--window", type=float, default=4.0, help="measuring window per run, seconds")
    parser.add_argument("--rows", type=int, default=100, help="rows per batch")
    parser.add_argument("--streams", type=int, default=None, help="override streams for every latency")
    parser.add_argument("--capacity", type=int, default=None, help="override ack_channel_capacity")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny run that checks the benchmark works, not its figures (short warm-up and window)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.warmup, args.window = SMOKE_WARMUP_S, SMOKE_WINDOW_S
    scenarios = tuple(
        Scenario(s.latency_s, args.streams or s.streams, args.capacity or s.capacity)
        for s in DEFAULT_SCENARIOS
    )
    results = run(scenarios, args.warmup, args.window, args.rows)
    if args.json:
        keys = (
            "latency_s",
            "sink_batches_per_s",
            "inline_batches_per_s",
            "bound_batches_per_s",
            "fraction_of_bound",
            "speedup_vs_inline",
        )
        payload = {
            "transport": TRANSPORT,
            "results": [{**{k: asdict(r)[k] for k in keys}, **asdict(r)} for r in results],
        }
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
