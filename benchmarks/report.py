"""Run the benchmarks and write ``docs/performance.md`` with tables and SVG figures (``make bench-report``).

Each benchmark runs as its own process with ``--json``; the JSON is kept next to the report
(``docs/performance/*.json``) so the page can be re-rendered without re-running (``--render-only``).
Figures are plain SVG written here (no plotting library needed); each states the transport it ran on
(the in-memory fake or the official SDK against the emulator in its own process) and the machine.
MB = 10^6 bytes throughout. Throughput counts *stamped* Arrow bytes (the payload plus the three reserved
``_twg_*`` columns the sink adds) unless a figure says otherwise.

Prose figures that no benchmark's JSON carries (CPU per GB of the emulator's parts, runs under load)
live in ``HAND_MEASURED`` with where each comes from; the page marks them as measured by hand, and one
not yet re-measured renders as a visible placeholder.

    python benchmarks/report.py                 # small sizes: a few minutes on 2 cores
    python benchmarks/report.py --full          # the issue's sizes (5 GB memory run; much longer)
    python benchmarks/report.py --render-only   # re-render from docs/performance/*.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerobus_orchestration.config import PoolConfig

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
DOCS = ROOT / "docs"
OUT = DOCS / "performance"
PAGE = DOCS / "performance.md"
FAKE = "in-memory fake transport (simulated ack latency)"
SDK = "official SDK + local emulator in its own process"
MB = 1_000_000
MIB = 1024 * 1024
STAMPED = "MB/s of stamped Arrow bytes"  # payload + _twg_emit_ts, _twg_source, _twg_offset; MB = 10^6 B
PAYLOAD = "MB/s of payload Arrow bytes"  # the caller's own columns only
TARGET_RSS_MB = 512  # issue 15: memory.py's peak_rss_mb (MB = 10^6 bytes) under this, any batch size
SCALING_DEFAULT_MB = 256.0  # scaling.py's --mb default (payload MB per table)

SMALL: dict[str, list[str]] = {
    "pipelining": ["--warmup", "0.5", "--window", "2"],
    "emulator_throughput": ["--rows", "500000", "--repetitions", "3", "--no-json"],
    "emulator_throughput_decimals": [
        "--rows",
        "500000",
        "--repetitions",
        "3",
        "--no-json",
        "--schema",
        "decimals",
    ],
    "scaling": ["--mb", "64"],
    "memory_100": ["--gb", "1", "--batch-mb", "100"],
    "memory_10": ["--gb", "1", "--batch-mb", "10"],
    "scaling_no_iceberg": ["--mb", "64", "--configs", "1x1,4x1", "--emulator-arg=--no-iceberg"],
    "isolation": ["--mb", "64"],
    "history": ["--sizes", "1000000,10000000", "--repetitions", "3"],
    "ipc_compression": ["--rows", "500000"],
    "input_check": ["--rows", "200000"],
}
FULL: dict[str, list[str]] = {
    "pipelining": [],
    "emulator_throughput": [],
    "emulator_throughput_decimals": ["--no-json", "--schema", "decimals"],
    "scaling": ["--mb", "256", "--repetitions", "3"],
    "memory_100": ["--gb", "5", "--batch-mb", "100"],
    "memory_10": ["--gb", "5", "--batch-mb", "10"],
    "scaling_no_iceberg": [
        "--mb",
        "256",
        "--configs",
        "1x1,4x1",
        "--repetitions",
        "3",
        "--emulator-arg=--no-iceberg",
    ],
    "isolation": ["--mb", "128", "--repetitions", "3"],
    "history": [],
    "ipc_compression": [],
    "input_check": ["--rows", "1000000", "--repetitions", "5"],
}
REPORT_COMMAND = {
    "full": "make bench-report BENCH_REPORT_ARGS=--full",  # python benchmarks/report.py --full
    "small": "make bench-report",  # python benchmarks/report.py
}
SCRIPT = {
    "pipelining": "pipelining.py",
    "emulator_throughput": "emulator_throughput.py",
    "emulator_throughput_decimals": "emulator_throughput.py",
    "scaling": "scaling.py",
    "memory_100": "memory.py",
    "memory_10": "memory.py",
    "scaling_no_iceberg": "scaling.py",
    "isolation": "isolation.py",
    "history": "history.py",
    "ipc_compression": "ipc_compression.py",
    "input_check": "input_check.py",
}


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        pass
    cpu = model or platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} CPU(s){memory}, {platform.system()}, Python {platform.python_version()}"


def run_benchmarks(sizes: dict[str, list[str]], only: Sequence[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("ZEROBUS_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    for name, args in sizes.items():
        if only and name not in only:
            continue
        command = [sys.executable, str(BENCHMARKS / SCRIPT[name]), "--json", *args]
        print(f"running {' '.join(command[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            raise SystemExit(f"{SCRIPT[name]} exited {done.returncode}")
        payload = json.loads(done.stdout)
        payload["_command"] = command_for(name, args)
        payload["_ran_at"] = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
        payload["_machine"] = machine()  # a page re-rendered elsewhere, or partly re-run, still says where
        (OUT / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def ran_on(data: dict[str, Any]) -> str:
    """The machine a benchmark's JSON was made on (older JSON did not say: this machine)."""
    return str(data.get("_machine") or machine())


def machines_line(data: dict[str, dict[str, Any]]) -> str:
    """The page's machine, or, when its benchmarks ran on different ones, each with its benchmarks."""
    hosts: dict[str, list[str]] = {}
    for name, d in data.items():
        hosts.setdefault(ran_on(d), []).append(name)
    if len(hosts) <= 1:
        return f"Machine: **{next(iter(hosts), machine())}**."
    return "Machines: " + "; ".join(f"**{host}** ({', '.join(names)})" for host, names in hosts.items()) + "."


def command_for(name: str, args: list[str]) -> str:
    return f"python benchmarks/{SCRIPT[name]} --json {' '.join(args)}".strip()


def sizes_of(data: dict[str, dict[str, Any]]) -> str | None:
    """``"full"`` or ``"small"`` if every benchmark's recorded command is that size's, else None."""
    for label, sizes in (("full", FULL), ("small", SMALL)):
        if all(d.get("_command") == command_for(name, sizes[name]) for name, d in data.items()):
            return label
    return None


def load(name: str) -> dict[str, Any] | None:
    path = OUT / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


# -- SVG ---------------------------------------------------------------------------------------------

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 66, 80
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "middle", extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif" {extra}>{html.escape(text)}</text>'
    )


def _frame(title: str, caption: str, y_label: str, y_max: float) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        _text(WIDTH / 2, 20, title, size=14, extra='font-weight="bold"'),
        _text(WIDTH / 2, HEIGHT - 28, caption, size=10, extra='fill="#555"'),
        _text(16, TOP + plot_h / 2, y_label, extra=f'transform="rotate(-90 16 {TOP + plot_h / 2})"'),
    ]
    for i in range(5):
        value = y_max * i / 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(_text(LEFT - 6, y + 4, f"{value:,.4g}", size=10, anchor="end"))
    return parts


def bar_chart(
    title: str, caption: str, y_label: str, groups: list[str], series: list[tuple[str, list[float]]]
) -> str:
    y_max = max((v for _, values in series for v in values), default=1.0) * 1.15 or 1.0
    parts = _frame(title, caption, y_label, y_max)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    group_w = plot_w / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(series))
    for g, group in enumerate(groups):
        x0 = LEFT + g * group_w + group_w * 0.1
        for s, (_, values) in enumerate(series):
            value = values[g]
            h = plot_h * value / y_max
            x = x0 + s * bar_w
            parts.append(
                f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                f'fill="{COLOURS[s % len(COLOURS)]}"/>'
            )
            parts.append(_text(x + bar_w / 2, TOP + plot_h - h - 3, f"{value:,.3g}", size=9))
        parts.append(_text(LEFT + g * group_w + group_w / 2, TOP + plot_h + 16, group, size=11))
    parts += _legend([name for name, _ in series])
    parts.append("</svg>")
    return "\n".join(parts)


def line_chart(title: str, caption: str, x_label: str, y_label: str, series: list[Series]) -> str:
    xs = [x for s in series for x, _ in s.points] or [1.0]
    ys = [y for s in series for _, y in s.points] or [1.0]
    x_max, y_max = max(xs) or 1.0, max(ys) * 1.1 or 1.0
    parts = _frame(title, caption, y_label, y_max)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    for i in range(5):
        x = LEFT + plot_w * i / 4
        parts.append(_text(x, TOP + plot_h + 16, f"{x_max * i / 4:,.3g}", size=10))
    parts.append(_text(LEFT + plot_w / 2, TOP + plot_h + 34, x_label, size=11))
    for s, line in enumerate(series):
        coords = " ".join(
            f"{LEFT + plot_w * x / x_max:.1f},{TOP + plot_h - plot_h * y / y_max:.1f}" for x, y in line.points
        )
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{COLOURS[s % len(COLOURS)]}" stroke-width="2"/>'
        )
    parts += _legend([s.name for s in series])
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(names: list[str]) -> list[str]:
    parts = []
    for i, name in enumerate(names):  # three to a row, under the title
        x, y = LEFT + 10 + (i % 3) * 180, 30 + (i // 3) * 14
        parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>')
        parts.append(_text(x + 14, y + 9, name, size=10, anchor="start"))
    return parts


def write_figure(name: str, svg: str) -> str:
    (OUT / name).write_text(svg + "\n", encoding="utf-8")
    return f"performance/{name}"


# -- the page ----------------------------------------------------------------------------------------


def flag_value(command: str | None, flag: str) -> float | None:
    """A numeric flag's value in a recorded benchmark command (``--mb 256``), None if absent."""
    words = shlex.split(command or "")
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return float(words[i + 1])
        if word.startswith(flag + "="):
            return float(word.split("=", 1)[1])
    return None


def payload_share(data: dict[str, Any]) -> float:
    """Payload bytes over stamped bytes of a scaling run (its ``--mb`` is payload MB per table)."""
    payload = flag_value(data.get("_command"), "--mb") or SCALING_DEFAULT_MB
    return float(payload / data["mb_per_table"])


def payload_note(data: dict[str, Any]) -> str:
    """What ``mb_per_table`` (stamped) is in payload terms: ``scaling.py --mb`` is payload MB per table."""
    payload = flag_value(data.get("_command"), "--mb") or SCALING_DEFAULT_MB
    stamped = data["mb_per_table"]
    extra = stamped / payload - 1
    return " ".join(
        [
            f"{stamped:g} MB per table and configuration, as sent: the command's `--mb {payload:g}` is",
            f"the payload (about {payload:g} MB of `id`, `device`, `reading`, `at`: narrow rows), and the",
            "sink adds the three reserved columns (`_twg_emit_ts`, `_twg_source`, `_twg_offset`),",
            f"{extra:.0%} more bytes on rows this narrow. Every MB/s below counts those stamped bytes;",
            f"payload MB/s is {payload / stamped:.2f} times the figure.",
        ]
    )


def repetitions(rows: list[dict[str, Any]]) -> int:
    """How many runs each scaling figure is the median of (1 for JSON from before ``--repetitions``)."""
    return int(rows[0].get("repetitions", 1)) if rows else 1


def spread(row: dict[str, Any], rate: str) -> str:
    """``median (min-max)`` of a scaling rate, or the figure alone when it ran once."""
    low, high = row.get(f"{rate}_min"), row.get(f"{rate}_max")
    if low is None or high is None or int(row.get("repetitions", 1)) < 2:
        return f"{row[rate]:.1f}"
    return f"{row[rate]:.1f} ({low:.0f}-{high:.0f})"


def scaling_section(data: dict[str, Any], where: str) -> list[str]:
    rows = data["results"]
    labels = [f"{r['streams']} x {r['tables']}" for r in rows]
    caption = f"{SDK}; {where}"
    throughput = write_figure(
        "scaling_throughput.svg",
        bar_chart(
            "Aggregate MB/s into the emulator (streams per table x tables)",
            caption,
            STAMPED,
            labels,
            [
                ("durable (acknowledged)", [r["mb_per_s_durable"] for r in rows]),
                ("visible (Delta commit)", [r["mb_per_s_visible"] for r in rows]),
            ],
        ),
    )
    latency = write_figure(
        "scaling_ack_latency.svg",
        bar_chart(
            "Submit to durable acknowledgement, per batch",
            caption,
            "seconds",
            labels,
            [("p50", [r["p50_ack_s"] for r in rows]), ("p99", [r["p99_ack_s"] for r in rows])],
        ),
    )
    lines = [
        "## Throughput vs streams, and two tables at once",
        "",
        f"Transport: **{SDK}**; emulator settings: {data['emulator']}. Batches of "
        f"{data['batch_rows']:,} rows; one pushing thread per table.",
        f"Command: `{data.get('_command', 'python benchmarks/scaling.py --json')}`.",
        "",
        payload_note(data),
        "",
        f"Each configuration ran {repetitions(rows)} time(s), interleaved with the others, on fresh "
        "tables; every figure is the median of those runs, the rates with their lowest and highest.",
        "",
        f"| streams per table | tables | durable, {STAMPED} (median, min-max) | durable, {PAYLOAD} | "
        f"visible, {STAMPED} (median, min-max) | visible, {PAYLOAD} | p50 ack s | p99 ack s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    share = payload_share(data)
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['tables']} | {spread(r, 'mb_per_s_durable')} | "
            f"{r['mb_per_s_durable'] * share:.1f} | {spread(r, 'mb_per_s_visible')} | "
            f"{r['mb_per_s_visible'] * share:.1f} | {r['p50_ack_s']:.3f} | {r['p99_ack_s']:.3f} |"
        )
    lines += ["", f"![throughput vs streams]({throughput})", "", f"![ack latency]({latency})", ""]
    return lines


def throughput_section(
    data: dict[str, Any],
    where: str,
    heading: str = "## The sink's own cost: sink vs a bare SDK loop, like for like",
    figure_name: str = "sink_vs_bare.svg",
    intro: str = "",
) -> list[str]:
    bare, sink = data["bare"], data["sink"]
    figure = write_figure(
        figure_name,
        bar_chart(
            "Sink vs bare SDK loop, same stamped bytes (median of interleaved pairs)",
            f"{SDK}; {where}",
            STAMPED,
            ["bare SDK loop", "sink"],
            [("MB/s (median)", [bare["mb_per_s"]["median"], sink["mb_per_s"]["median"]])],
        ),
    )
    arrow_json = data.get("arrow_over_json")
    # Runs from before ``payload_bytes`` was recorded have no payload figures (rendered "n/a").
    share = data["payload_bytes"] / data["stamped_bytes"] if data.get("payload_bytes") else None
    return [
        heading,
        "",
        *([intro, ""] if intro else []),
        f"Transport: **{SDK}**. {data['rows']:,} rows in batches of {data['batch_rows']:,}, "
        f"{data['repetitions']} interleaved bare/sink pairs, {data['stamped_bytes'] / MB:.1f} MB stamped "
        "per run (the bare loop sends the sink's own stamped batches), of which "
        + (f"{data['payload_bytes'] / MB:.1f} MB" if share else "(not recorded)")
        + " are the payload. Each MB/s and CPU per GB says whose bytes it counts: stamped (payload plus "
        "the three `_twg_*` columns) or payload (the caller's own columns).",
        f"Command: `{data.get('_command', 'python benchmarks/emulator_throughput.py --json')}`.",
        "",
        f"| path | rows/s (median) | {STAMPED} (median, min-max) | {PAYLOAD} (median) | "
        "client CPU s per stamped GB | client CPU s per payload GB |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {name} | {fig['rows_per_s']['median']:,.0f} | {fig['mb_per_s']['median']:.1f} "
            f"({fig['mb_per_s']['min']:.1f}-{fig['mb_per_s']['max']:.1f}) | "
            f"{per_payload(fig['mb_per_s']['median'], share)} | {fig['cpu_s_per_gb']['median']:.2f} | "
            f"{per_payload(fig['cpu_s_per_gb']['median'], 1 / share if share else None, 2)} |"
            for name, fig in (("bare SDK loop", bare), ("sink", sink))
        ),
        "",
        f"sink over bare: **{data['sink_over_bare']:.2f}** (min {data['sink_over_bare_min']:.2f}, max "
        f"{data['sink_over_bare_max']:.2f}); client CPU per GB sink over bare: "
        f"**{data['client_cpu_per_gb_sink_over_bare']:.2f}**; Arrow over JSON: "
        + (f"{arrow_json:.1f}x" if arrow_json is not None else "not run (`--no-json`)")
        + f"; rows verified in Delta: {data['verified']}. The Arrow path alone (the SDK's Arrow stream, "
        f"payload columns only, sent once): {data['arrow_rows_per_s']:,.0f} rows/s, "
        f"{data['arrow_mb_per_s']:.1f} MB/s of payload Arrow bytes (not comparable with the stamped "
        "figures above).",
        "",
        f"![sink vs bare]({figure})",
        "",
    ]


def per_payload(value: float, factor: float | None, digits: int = 1) -> str:
    """A stamped figure restated per payload byte (``factor``: payload/stamped for a rate, its inverse for
    a cost per GB); "n/a" when the run did not record its payload bytes."""
    return "n/a" if factor is None else f"{value * factor:.{digits}f}"


def rss_mb(run: dict[str, Any], key: str) -> float:
    """``peak_rss_mb`` / ``baseline_rss_mb`` in MB = 10^6 bytes. A run without ``peak_rss_mib`` predates
    the unit fix: memory.py then divided ``ru_maxrss`` by 1024, so its ``*_rss_mb`` were MiB."""
    value: float = run[key]
    return value if "peak_rss_mib" in run else value * MIB / MB


def size(n: int) -> str:
    return f"{n / MIB:g} MiB"


def memory_section(runs: list[dict[str, Any]], where: str) -> list[str]:
    series = [
        Series(f"{r['batch_mb']:g} MB batches, RSS", [(p[0], p[1]) for p in r.get("rss_over_time", [])])
        for r in runs
    ] + [
        Series(f"{r['batch_mb']:g} MB batches, Arrow", [(p[0], p[2]) for p in r.get("rss_over_time", [])])
        for r in runs
    ]
    gb = max(r["gb"] for r in runs)
    figure = write_figure(
        "memory_rss.svg",
        line_chart(
            f"Client memory while streaming a {gb:g} GB RecordBatchReader",
            f"{SDK} (daemon mode); {where}",
            "seconds",
            "MB (10^6 bytes)",
            series,
        ),
    )
    lines = [
        "## Client memory over a large stream",
        "",
        f"Transport: **{SDK}** (the runtime's daemon mode: the emulator is its own process, so RSS is the "
        "client's). The reader generates fresh batches and keeps none; in flight is bounded by "
        "`pool.max_inflight_bytes`, larger batches are sliced at `pool.max_batch_bytes`. Every figure "
        "in this section is in MB = 10^6 bytes (the pool's settings are quoted in MiB = 2^20 bytes, as "
        "the config states them).",
        "",
        "| GB | batch MB | peak RSS MB | baseline RSS MB (imports) | peak Arrow MB | max_inflight_bytes "
        "| s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['gb']:g} | {r['batch_mb']:g} | {rss_mb(r, 'peak_rss_mb'):.0f} | "
            f"{rss_mb(r, 'baseline_rss_mb'):.0f} | {r['peak_arrow_mb']:.0f} | "
            f"{r['max_inflight_bytes']:,} ({size(r['max_inflight_bytes'])}) | {r['seconds']:.1f} |"
        )
    commands = "; ".join(f"`{r['_command']}`" for r in runs if "_command" in r)
    verdicts = ", ".join(
        f"{r['batch_mb']:g} MB batches {'met' if rss_mb(r, 'peak_rss_mb') < TARGET_RSS_MB else 'not met'}"
        for r in runs
    )
    lines += [
        "",
        f"Target (issue 15): client peak RSS < {TARGET_RSS_MB} MB, whatever the batch size: {verdicts}.",
        "",
        f"Commands: {commands}." if commands else "",
        "",
        f"![client memory]({figure})",
        "",
        "**These bounds hold in daemon mode only.** The Python API's default is `emulator.mode = "
        '"in_process"`: the embedded emulator then runs inside the client process, and its WAL\'s '
        "in-memory tail, the gRPC messages it is decoding and the materialiser's Parquet buffers count "
        f"in the same RSS: {HAND_MEASURED['in_process_rss'].cite()}. A worker with little memory should "
        'set `emulator.mode = "daemon"` (the default of the Dagster resource, the Airflow hook and the '
        "`zerobus-orch` commands) or write to a real endpoint.",
        "",
        "The rest of this section was measured by hand (`memory.py --breakdown` and side-by-side runs) "
        "when `peak_rss_mb` was still in MiB: its figures are MiB, not taken from the run above.",
        "",
        "Where the RSS is (sampled during a run from `/proc/self/status`, `pa.total_allocated_bytes()`",
        "and glibc's `mallinfo2`): the baseline is the interpreter with pyarrow, deltalake, the SDK and",
        "the runtime imported (~110 MiB of it mapped libraries). *Peak Arrow* is one input batch as the",
        "reader builds it. Each in-flight byte is then held twice on glibc's heap: the sink keeps the",
        "batch (its slices compacted, so they do not pin the input batch) until it is acknowledged, for",
        "re-submission after a stream failure and for its content digest; and the SDK serialises it to",
        "an IPC `bytes` object and copies that into its Rust core, which keeps it until the",
        "acknowledgement. The rest is glibc keeping freed batch-sized blocks: after the first free its",
        "dynamic mmap threshold rises to the batch size, later blocks come from the heap, and holes",
        "between blocks still in flight are not returned (~120 MiB with 8 MiB slices and 64 MiB in",
        "flight, 50-90 MiB with 4 MiB slices and 32 MiB).",
        "",
        "What brought 100 MB batches down from 719 MiB: every layer between the reader and the sink (row",
        "counting, resume slicing, the table's word on what was delivered) now lets go of an input batch",
        "before asking for the next, where two input batches used to be alive at once (~100 MB); and the",
        "defaults went from 64 MiB in flight and 8 MiB slices to 32 MiB and 4 MiB (half the in-flight",
        "copies, fewer unusable heap holes). Before, with the same commands: 719 MiB (100 MB batches)",
        "and 535 MiB (10 MB batches). The smaller defaults cost no throughput here (2 GB in 100 MB",
        "batches, same code, run alternately: 16.9-19.1 s against 17.3-20.3 s with 64 MiB / 8 MiB, and",
        "6.1-6.4 client CPU s against 6.4-8.1: fewer page faults). Returning freed blocks to the",
        "system (`mallopt(M_MMAP_THRESHOLD, 1 MiB)`, or `malloc_trim` every 50 ms) lowered the peak",
        "further but doubled the client CPU per GB (1 GB in 100 MB batches: 3.6 -> 7.1 s; every",
        "batch-sized buffer then costs fresh pages: page faults and zeroing), so the runtime does not do",
        "it. A worker that must stay lower can lower `pool.max_inflight_bytes` (RSS moves by about twice",
        "the change), or set `MALLOC_MMAP_THRESHOLD_=1048576` in its environment and pay that CPU.",
        "",
    ]
    return lines


def pipelining_section(data: dict[str, Any]) -> list[str]:
    rows = data["results"]
    labels = [f"{r['latency_s'] * 1000:g} ms, {r['streams']}x{r['ack_channel_capacity']}" for r in rows]
    figure = write_figure(
        "pipelining.svg",
        bar_chart(
            "Durable batches/s: sink vs one inline wait-per-batch loop",
            f"{FAKE}; {ran_on(data)}",
            "batches/s",
            labels,
            [
                ("sink", [r["sink_batches_per_s"] for r in rows]),
                ("inline loop", [r["inline_batches_per_s"] for r in rows]),
                ("Little's-law bound", [r["bound_batches_per_s"] for r in rows]),
            ],
        ),
    )
    lines = [
        "## Pipelining (in-memory fake transport)",
        "",
        f"Transport: **{FAKE}**: this measures the sink's pipelining against an ack latency it simulates, "
        "not the SDK or the service. Scenarios are ack latency, streams x `ack_channel_capacity`.",
        f"Command: `{data.get('_command', 'python benchmarks/pipelining.py --json')}`.",
        "",
        "| scenario | sink batches/s | inline batches/s | bound | of bound | speed-up vs inline |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in zip(labels, rows, strict=True):
        lines.append(
            f"| {label} | {r['sink_batches_per_s']:,.0f} | {r['inline_batches_per_s']:,.0f} | "
            f"{r['bound_batches_per_s']:,.0f} | {r['fraction_of_bound']:.0%} | "
            f"{r['speedup_vs_inline']:.1f}x |"
        )
    lines += ["", f"![pipelining]({figure})", ""]
    return lines


def isolation_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "## Per-stream isolation (official SDK + the emulator in its own process)",
        "",
        f"Transport: **{SDK}**, the pool's defaults ({data['streams']} streams per table, "
        f"`pool.max_inflight_bytes` {data['max_inflight_mb']} MB: one share per stream), one pushing "
        f"thread, {data['mb_per_scenario']} MB of payload per scenario in {data['batch_mb']} MB batches. "
        f"The emulator throttles every stream to {data['per_stream_mb_s_limit']:g} MB/s (standing in for "
        "the service's per-stream quota), so a stream's own rate is that bound. *delayed*: the table's "
        f"second stream acknowledges every batch {data['delay_s']:g} s late (`delay_acks` aimed at it). "
        "A stream's rate is the stamped bytes it delivered over the time from the first push to its last "
        "acknowledgement (ADR 0008).",
        f"Command: `{data.get('_command', 'python benchmarks/isolation.py --json')}`.",
        "",
        "| scenario | stream 0 MB/s | stream 1 MB/s | push s | in flight, peak MB | RSS growth MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in data["runs"]:
        first, second = run["stream_mb_s"][0], run["stream_mb_s"][1]
        lines.append(
            f"| {run['scenario']} | {first:.2f} | {second:.2f} | {run['push_s']:.1f} | "
            f"{run['inflight_peak_mb']:.1f} | {run['rss_growth_mb']:.0f} |"
        )
    lines += [
        "",
        f"The healthy stream keeps **{data['ratio']:.3f}** of its rate without the delay (median of "
        f"{data['repetitions']} interleaved pair(s), {data['ratio_min']:.3f}-{data['ratio_max']:.3f}; target "
        f">= 0.9): {data['delayed_healthy_mb_s']:.2f} against {data['baseline_mb_s']:.2f} MB/s. Memory stays "
        f"within the documented bound: at most {data['inflight_peak_mb']:.1f} MB in flight (the budget is "
        f"{data['max_inflight_mb']} MB), RSS up {data['rss_growth_mb']:.0f} MB at most (documented: about "
        f"twice the budget plus one input batch, {data['rss_bound_mb']:.0f} MB).",
        "",
    ]
    return lines


@dataclass(frozen=True)
class Hand:
    """A figure the page quotes that no benchmark's JSON carries: measured by hand, with where from.

    ``value`` None: not (re-)measured since the code changed; the page shows a visible placeholder."""

    key: str  # the entry's key in HAND_MEASURED: a placeholder names it
    what: str
    value: str | None
    source: str

    def cite(self, unit: str = "") -> str:
        if self.value is None:
            return f"**[TBD: {self.key}]**"
        return f"{self.value}{' ' + unit if unit else ''} *(by hand)*"

    def bounds(self) -> tuple[float, float] | None:
        """``"~2.2"`` -> (2.2, 2.2), ``"3.2-3.7"`` -> (3.2, 3.7); None if unset or not a plain figure."""
        match = re.fullmatch(r"~?(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?", self.value or "")
        if match is None:
            return None
        return float(match[1]), float(match[2] or match[1])


# Update these when re-measuring: value, and in source the command and the code it ran on.
HAND_MEASURED: dict[str, Hand] = {
    "in_process_rss": Hand(
        "in_process_rss",
        "client RSS with the emulator in process vs in daemon mode",
        "a 1 GB reader in 100 MB batches peaked at ~994 MiB in process against 468 MiB in daemon mode",
        "issue 15's new-user audit: `ZerobusRuntime.write` of memory.py's generated reader, once with the "
        'library default `emulator.mode = "in_process"` and once with `"daemon"`, peak `ru_maxrss`',
    ),
    "sink_pieces": Hand(
        "sink_pieces",
        "client CPU per 1,000,000 rows (20,000-row batches), bare loop against the sink with pieces off",
        "events: bare 212 ms (172-217), sink 307 (261-322), 283 without content digests, 263 without "
        "coverage at all, 263 with one stream instead of the pool's default two; decimals: bare 413 ms "
        "(410-447), sink 862 (842-913), 853 without content digests, 866 without coverage, 823 with one "
        "stream; before this round's decimal text (Arrow's cast), the decimals' sink measured 1,325 against "
        "962 after in one process (bare 466). emulator_throughput.py itself, the previous commit's code and "
        "this one's alternating, 3 runs each (medians): decimals sink over bare 0.56 -> 0.79, client CPU "
        "per GB sink over bare 2.94 -> 2.45; events (nothing on its path changed) 0.82 -> 0.86 and "
        "1.61 -> 1.63; the runs above came later in the same session, at load 7-10, so the spread "
        "between runs is about that size. Per run, the pieces' own CPU inside the sink (thread time, "
        "events / decimals): the wire conversion and value checks (the gate's conform) 26 / 385 ms, of "
        "which the decimals' text is nearly all; stamping the three reserved columns 18 / 19; the content "
        "digest 15 / 23; recording ranges and digests in SQLite 14 / 23 (one transaction per acknowledged "
        "burst, ~1 ms); opening the pool's two streams 41 / 36 (the bare loop opens one); the pool, the "
        "ack lane and the per-batch checks and bookkeeping ~38 / ~50. The official SDK's own serialising "
        "and sending (108 / 203 ms on the pushing thread) is paid by both paths alike. The rest of the gap "
        "is the second stream (its open and its share of the SDK's per-stream work) and the per-run "
        "set-up: the catalog's read of the table, the coverage store, the pool's threads (a run of one "
        "20,000-row batch, set-up included, costs the sink 68 ms and the bare loop 30)",
        "`python benchmarks/sink_ablation.py --rounds 7` and `--schema decimals --rounds 5` (the variants "
        "interleaved, medians (min-max), machine at load 7-10); the pieces by a thread-time wrapper around "
        "each piece over 5 (3) runs of the same sink; before/after the decimal text: the previous commit's "
        "wire_values.decimal_text switched in the same process, 7 interleaved rounds",
    ),
    "digest_speed": Hand(
        "digest_speed",
        "the content digest per batch, old and new code in one process (medians of 7 x 500 calls)",
        "147 KB without nulls 227 -> 106 us, with 10 % nulls 512 -> 254 us, the 761 KB "
        "emulator_throughput batch 450 -> 227 us (1.7 -> 3.4 GB/s); the same digests",
        "a timeit script over coverage.digest.rows_digest of the previous commit and of this one",
    ),
    "contended_4x1": Hand(
        "contended_4x1",
        "durable MB/s with 4 streams while other work shares the two cores",
        "120-290",
        "`python benchmarks/scaling.py --json --mb 256` runs while other test suites ran on the same "
        "two cores",
    ),
}


def cpu_bound(cores: int, *costs: tuple[float, float] | None) -> str:
    """MB/s that ``cores`` sustain at the summed CPU s per GB (a range: the costs' spread)."""
    if any(cost is None for cost in costs):
        return "**[to compute from the figures above]**"
    low = sum(c[0] for c in costs if c is not None)
    high = sum(c[1] for c in costs if c is not None)
    fast, slow = cores * 1000 / low, cores * 1000 / high
    rate = f"~{fast:.0f}" if round(fast) == round(slow) else f"~{slow:.0f}-{fast:.0f}"
    return f"{rate} MB/s ({cores} cores / {low:.1f}-{high:.1f} CPU s per GB)"


def limits_section(
    default: dict[str, Any], without: dict[str, Any], throughput: dict[str, Any] | None
) -> list[str]:
    by_config = {(r["streams"], r["tables"]): r for r in default["results"]}
    lines = [
        "## What limits the embedded default",
        "",
        f"Transport: **{SDK}**. The same runs with the emulator's Iceberg mirror off "
        f"(`{without.get('_command', 'python benchmarks/scaling.py --emulator-arg=--no-iceberg')}`), "
        f"in {STAMPED} (median, min-max):",
        "",
        "| streams x tables | durable, default | durable, no Iceberg mirror | "
        "visible, default | visible, no Iceberg mirror |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in without["results"]:
        base = by_config.get((r["streams"], r["tables"]))
        if base is None:
            continue
        lines.append(
            f"| {r['streams']} x {r['tables']} | {spread(base, 'mb_per_s_durable')} | "
            f"{spread(r, 'mb_per_s_durable')} | "
            f"{spread(base, 'mb_per_s_visible')} | {spread(r, 'mb_per_s_visible')} |"
        )
    hand = HAND_MEASURED
    cores = int(default.get("cpus") or os.cpu_count() or 1)
    visible = [r["mb_per_s_visible"] for r in default["results"]]
    if throughput is not None:
        cpu = throughput["sink"]["cpu_s_per_gb"]
        client: tuple[float, float] | None = (cpu["min"], cpu["max"])
        client_text = (
            f"{cpu['median']:.1f} s (emulator_throughput.py's sink above: median, "
            f"{cpu['min']:.1f}-{cpu['max']:.1f} over its runs)"
        )
    else:
        client, client_text = None, "**[run emulator_throughput.py: the sink's client CPU per GB]**"
    budget = PoolConfig().max_inflight_bytes
    four = by_config.get((4, 1))
    target = (
        f"This run's 4 x 1 durable figure: **{spread(four, 'mb_per_s_durable')} MB/s** (median of "
        f"{repetitions([four])}; target >= 300, {'met' if four['mb_per_s_durable'] >= 300 else 'not met'})"
        if four
        else "This run has no 4 x 1 configuration"
    )
    four_cpu = four if four is not None and "emulator_cpu_s_per_gb_durable" in four else None
    if four_cpu is not None:
        durable_cpu = four_cpu["emulator_cpu_s_per_gb_durable"]
        visible_cpu = four_cpu["emulator_cpu_s_per_gb_visible"]
        bench_client = four_cpu["client_cpu_s_per_gb"]
        measured = (
            f"Measured in the 4 x 1 run above (CPU s per stamped GB, from `/proc`): the emulator "
            f"**{durable_cpu:.1f}** from the first push to durable and **{visible_cpu:.1f}** to visible "
            f"(its gRPC handlers, WAL and, overlapping, the materialiser; the Iceberg mirror follows "
            f"after), the benchmark's client process **{bench_client:.1f}** until durable (the sink, the "
            f"SDK, its pushing and polling threads); the sink alone, from emulator_throughput.py, "
            f"{client_text}."
        )
        sustained = cpu_bound(cores, (visible_cpu, visible_cpu), client)
        burst = cpu_bound(cores, (durable_cpu, durable_cpu), (bench_client, bench_client))
    else:
        measured = "**[re-run scaling.py: it records the emulator's and the client's CPU per GB]**"
        sustained = burst = "**[to compute from the figures above]**"
    lines += [
        "",
        "The emulator is one Python process: its gRPC handlers (a FlightData frame read in place and",
        "copied once, into the WAL; an XXH3-64 checksum per record; one fsync for every record written",
        "meanwhile), the materialiser (Parquet with Zstandard level 1 for tables with Iceberg reads on,",
        "as on Databricks, Snappy otherwise; no dictionary pages, statistics per column chunk; and the",
        "Delta commit, every `time_to_table_s`, from the WAL's in-memory tail) and the",
        "Iceberg mirror (one incremental conversion per Delta commit) share one interpreter lock and,",
        "here, two cores with the client. The Parquet encoding runs on the Delta library's own threads,",
        "which the emulator's own process runs at a lower priority (nice +10): in a burst the",
        "acknowledgements come first and the commit a little later, as on Zerobus, where the two run on",
        "separate machinery. WAL group commit is not the limit; more streams help only until the",
        "processes are CPU-bound.",
        "",
        measured,
        "",
        f"A small in-flight budget (`pool.max_inflight_bytes`, {budget / MIB:g} MiB by default) keeps "
        "acknowledgement latency at a few hundred milliseconds instead of seconds of queue (the p50/p99 "
        "columns above); it also bounds one table's rate at about the budget over the ack latency. What "
        "bounds the rate: with visibility keeping up, the emulator to visible plus the sink bound it at "
        f"{sustained} sustained (this run's visible column: {min(visible):.0f}-{max(visible):.0f} MB/s). "
        "A burst only has to be durable first: the benchmark's client process plus the emulator's "
        f"durable path bound it at {burst} if nothing else runs; a burst of a few hundred MB lasts about "
        "one materialiser period, so little Parquet encoding overlaps it. "
        f"{target}; when other work shares the two cores it drops ({hand['contended_4x1'].cite('MB/s')}).",
        "",
        "Measured by hand, not by this run (`HAND_MEASURED` in `benchmarks/report.py`; **TBD** where "
        "not re-measured since the code changed):",
        "",
    ]
    lines += [f"- `{h.key}`, {h.what}: {h.value or '**TBD**'} ({h.source})." for h in hand.values()]
    lines.append("")
    return lines


def provenance(data: dict[str, dict[str, Any]]) -> list[str]:
    """How the page's JSON was made: the report command, or each benchmark's own if sizes were mixed."""
    ran = sorted({d["_ran_at"] for d in data.values() if "_ran_at" in d})
    when = (f" Benchmarks ran {ran[0]}" + (f" to {ran[-1]}" if len(ran) > 1 else "") + ".") if ran else ""
    label = sizes_of(data)
    if label is not None:
        made = f"Generated by `{REPORT_COMMAND[label]}` (`benchmarks/report.py`, {label} sizes)."
    else:
        made = (
            "Generated by `benchmarks/report.py` from runs of mixed sizes (some re-run with `--only`), "
            "each with the command listed below."
        )
    lines = [f"{made}{when} Page rendered {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.", ""]
    lines += ["| benchmark | command (sizes) |", "|---|---|"]
    for name, d in data.items():
        lines.append(f"| {name} | `{d.get('_command', 'not recorded')}` |")
    return [*lines, ""]


def _spread_s(figure: dict[str, float]) -> str:
    return f"{figure['median']:.3f} ({figure['min']:.2f}-{figure['max']:.2f})"


def history_section(data: dict[str, Any]) -> list[str]:
    tables = data["tables"]
    base = tables[0]
    sizes = ", ".join(f"{t['rows']:,}" for t in tables)
    lines = [
        "## Cost as tables and history grow",
        "",
        f"Tables of {sizes} rows, each in runs of "
        f"{data['run_rows']:,} rows by {data['writers']} interleaved writers (one job a day each, its own "
        "source, all writers' runs of a day at once; every ~1 s commit holds two batches of each running "
        "writer, written with the emulator's own Parquet settings and the sink's own stamping; the Iceberg "
        "mirror converts it). Measured for the latest run of one writer, every size and kind interleaved "
        f"{data['repetitions']} times in one run, medians (min-max) of wall seconds on a machine other work "
        "shares: compare the rows with each other. *Unbounded*: a host that knows nothing of the run reads "
        "every file whose `_twg_source` statistics admit its tag; with writers mixed in every file, that "
        "is every file. *Bounded*: the read also prunes by `_twg_emit_ts` from when the run can first have "
        f"been stamped (the write's `not_before` or this host's first look, less "
        f"`coverage.emit_margin_s` = {data['emit_margin_s']:g} s; docs/adr/0002-coverage-home.md). A "
        "resume waits `coverage.catch_up_settle_s` (2 s by default) on top of its catch-up's read.",
        f"Command: `{data.get('_command', 'python benchmarks/history.py --json')}`.",
        "",
        "| rows | files | resume catch-up, unbounded s | bounded s | read-back, unbounded s | bounded s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for t in tables:
        lines.append(
            f"| {t['rows']:,} | {t['files']:,} | {_spread_s(t['catch_up_unbounded_s'])} | "
            f"{_spread_s(t['catch_up_bounded_s'])} | {_spread_s(t['readback_unbounded_s'])} | "
            f"{_spread_s(t['readback_bounded_s'])} |"
        )
    largest = tables[-1]
    lines += [
        "",
        f"Against the {base['rows']:,}-row table (target: within 2x and at most 5 s on 100M rows): the "
        f"bounded catch-up {largest['catch_up_bounded_over_smallest']:.2f}x "
        f"({largest['catch_up_bounded_s']['median']:.2f} s), the bounded read-back "
        f"{largest['readback_bounded_over_smallest']:.2f}x "
        f"({largest['readback_bounded_s']['median']:.2f} s); "
        f"unbounded {largest['catch_up_unbounded_over_smallest']:.2f}x and "
        f"{largest['readback_unbounded_over_smallest']:.2f}x, growing with the table.",
        "",
    ]
    coverage = data["coverage"]
    lines += [
        f"Coverage over a year: {coverage['days']} daily partitions of {coverage['batches']} delivered "
        "batches each (real `CoverageStore` records with their content digests); the file's size after "
        "a checkpoint, and the time to open it and read one partition's ranges and digests (a new "
        "connection, as a write's process opens it; median of 7). Targets: at most 50 MB and 0.2 s.",
        "",
        "| compaction | partitions | file MB | open + one partition s |",
        "|---|---:|---:|---:|",
    ]
    for run in coverage["runs"]:
        label = "daily, as writes run it" if run["daily_compaction"] else "none (before this release)"
        lines.append(
            f"| {label} | {run['partitions']} | {run['file_mb']:.2f} | "
            f"{_spread_s(run['open_and_read_one_partition_s'])} |"
        )
    return [*lines, ""]


def compression_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "## IPC compression on bandwidth-bound links",
        "",
        f"Transport: **{SDK}**, through a byte-counting TCP proxy in its own process. The sink, every "
        f"integrity feature on, sends {data['rows']:,} realistic order rows "
        f"({data['payload_bytes'] / MB:.1f} MB of payload, {data['stamped_bytes'] / MB:.1f} MB stamped) once "
        f"per codec of `sdk.ipc_compression`, the codecs interleaved {data['repetitions']} times, medians "
        "(min-max). Wire bytes: what the client sent on the gRPC connection, framing included. Every "
        "figure counts **payload** bytes (the caller's own columns).",
        f"Command: `{data.get('_command', 'python benchmarks/ipc_compression.py --json')}`.",
        "",
        "| `sdk.ipc_compression` | wire bytes per payload byte | client CPU s per payload GB | "
        "payload MB/s (shared cores) |",
        "|---|---:|---:|---:|",
    ]
    for c in data["codecs"]:
        cpu, rate = c["client_cpu_s_per_payload_gb"], c["payload_mb_per_s"]
        lines.append(
            f"| {c['codec']} | {c['wire_per_payload_byte']:.3f} | {cpu['median']:.2f} "
            f"({cpu['min']:.2f}-{cpu['max']:.2f}) | {rate['median']:.1f} "
            f"({rate['min']:.0f}-{rate['max']:.0f}) |"
        )
    return [*lines, "", *compression_advice(data["codecs"]), ""]


def compression_advice(codecs: list[dict[str, Any]]) -> list[str]:
    """When each codec sends the most payload: a link of L MB/s carries L / (wire per payload byte) of
    payload, one client core 1000 / (CPU s per payload GB); a stronger codec wins below the link speed
    where the weaker one's wire rate meets the stronger one's CPU limit."""
    by = {c["codec"]: c for c in codecs}
    if not {"none", "lz4_frame", "zstd"} <= set(by):
        return []

    def per_core(codec: str) -> float:
        return 1000 / float(by[codec]["client_cpu_s_per_payload_gb"]["median"])

    lz4_below = by["none"]["wire_per_payload_byte"] * per_core("lz4_frame")
    zstd_below = by["lz4_frame"]["wire_per_payload_byte"] * per_core("zstd")
    return [
        f"When to turn it on: one client core compresses and sends {per_core('lz4_frame'):.0f} MB/s of "
        f"payload with `lz4_frame` and {per_core('zstd'):.0f} with `zstd` "
        f"({per_core('none'):.0f} with none), and a link carries its speed divided by the wire bytes per "
        "payload byte. So `lz4_frame` sends more "
        f"payload than none on links slower than about {lz4_below:.0f} MB/s per client core, and `zstd` "
        f"more than `lz4_frame` below about {zstd_below:.0f} MB/s per core (a link shared with other "
        "traffic, a VPN, a cross-region or on-premises client). On a fast link in the same region, leave "
        "it off: the CPU is then the limit. These rows hold repeated text and the reserved columns, which "
        "compress well; random binary payload gains less. The emulator decompresses on its side, as the "
        "service does; its CPU is not in these figures."
    ]


def input_check_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "## The whole-input check",
        "",
        f"Transport: **{SDK}** (the runtime's embedded default in daemon mode). A file ingest is checked "
        "whole before its first row is sent (`sink/input_check.py`: every row against the table): a "
        "Parquet file is read twice, a CSV file parsed once and spooled to local disk as it is checked "
        "(`spool.py`), then sent from there; *streamed* gives the same write the file as a stream (read "
        "once, only its first batch checked ahead: the cost of an ingest before the check); *the check "
        "alone* is the pre-pass by itself, without a spool. "
        f"{data['rows']:,} rows (an id, a DATE, a UTC TIMESTAMP, a double, a short note) per file, each "
        f"kind {data['repetitions']} times interleaved, every write a new partition of one table; medians "
        "(min-max), wall clock on shared cores. MB counts **payload** bytes.",
        f"Command: `{data.get('_command', 'python benchmarks/input_check.py --json')}`.",
        "",
        "| file | payload MB | checked s | streamed s | checked / streamed | the check alone s | "
        "check payload MB/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in data["formats"]:
        spans = [f[k] for k in ("checked", "streamed", "check")]
        cells = [f"{x['median_s']:.2f} ({x['min_s']:.2f}-{x['max_s']:.2f})" for x in spans]
        lines.append(
            f"| {f['format']} ({f['file_mb']:.0f} MB) | {f['payload_mb']:.0f} | {cells[0]} | {cells[1]} | "
            f"{f['checked_over_streamed']:.2f} | {cells[2]} | {f['check_payload_mb_per_s']:.0f} |"
        )
    return [
        *lines,
        "",
        "The price of *nothing sent on bad data* is one more read and check of a Parquet file, about the "
        "check alone on top of the streamed write, and for a CSV file the check and the spool's write and "
        "read instead of a second parse. Where the checked and streamed spreads overlap (other work on the "
        "cores), their ratio is noise: the check alone is the figure to read. Parquet column statistics "
        "could answer some checks (ranges, nulls) without decoding the data, but they are the producer's "
        "word and may be absent; the check reads the values.",
        "",
    ]


def render() -> str:
    data = {name: d for name in SCRIPT if (d := load(name)) is not None}
    lines = [
        "# Performance",
        "",
        *provenance(data),
        f"{machines_line(data)} MB = 10^6 bytes, MiB = 2^20 bytes. Throughput counts stamped Arrow "
        "bytes (the payload plus the three reserved `_twg_*` columns the sink adds) unless it says "
        "otherwise.",
        "",
        "Client and emulator share the machine's cores, so these figures compare paths with one another on",
        "this machine; they are not Zerobus service figures. Acknowledgements are durable (the emulator",
        "fsyncs its WAL before acking); *visible* means committed to the Delta table. Each section names",
        "its transport: the **official SDK + the emulator in its own process**, or the **in-memory fake**.",
        "The JSON each section was rendered from is in `docs/performance/`.",
        "",
    ]
    scaling = data.get("scaling")
    if scaling:
        lines += scaling_section(scaling, ran_on(scaling))
    throughput = data.get("emulator_throughput")
    if throughput:
        lines += throughput_section(throughput, ran_on(throughput))
    decimals = data.get("emulator_throughput_decimals")
    if decimals:
        lines += throughput_section(
            decimals,
            ran_on(decimals),
            heading="## A decimal-heavy payload: the sink's cost when every DECIMAL goes as text",
            figure_name="sink_vs_bare_decimals.svg",
            intro=(
                "The same comparison with `--schema decimals`: an id, four DECIMAL columns (18, 38, 9 and 12 "
                "digits) and a short string. The wire schema carries a DECIMAL as its text "
                "([architecture: the wire contract](architecture.md#the-wire-contract)), so the sink "
                "converts every decimal value, the costliest step of the wire conversion; the bare loop "
                "sends the sink's own converted batches, made before its clock starts."
            ),
        )
    if throughput or decimals:
        lines += [
            "Where the sink's own cost goes, measured by hand (not by the runs above): "
            f"{HAND_MEASURED['sink_pieces'].cite()}. The content digest, per batch: "
            f"{HAND_MEASURED['digest_speed'].cite()}. Neither target of issue 27 (sink over bare >= 0.95, "
            "client CPU per GB sink over bare <= 1.25) is met with every integrity feature on. The "
            "comparison is like for like in what is sent, not in what is done: the bare loop is handed "
            "batches already stamped and converted to the wire schema (the decimals' text made before its "
            "clock starts), opens one stream, waits for nothing until its one flush and records nothing; "
            "the sink does all of that itself, every batch, and is charged for it.",
            "",
        ]
    memory = [m for m in (data.get("memory_100"), data.get("memory_10")) if m]
    if memory:
        lines += memory_section(memory, ran_on(memory[0]))
    pipelining = data.get("pipelining")
    if pipelining:
        lines += pipelining_section(pipelining)
    isolation = data.get("isolation")
    if isolation:
        lines += isolation_section(isolation)
    without = data.get("scaling_no_iceberg")
    if scaling and without:
        lines += limits_section(scaling, without, throughput)
    history = data.get("history")
    if history:
        lines += history_section(history)
    compression = data.get("ipc_compression")
    if compression:
        lines += compression_section(compression)
    input_check = data.get("input_check")
    if input_check:
        lines += input_check_section(input_check)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="the issue's sizes (5 GB memory runs)")
    parser.add_argument("--render-only", action="store_true", help="re-render from docs/performance/*.json")
    parser.add_argument("--only", action="append", default=[], choices=sorted(SCRIPT), help="run just these")
    args = parser.parse_args(argv)
    if not args.render_only:
        run_benchmarks(FULL if args.full else SMALL, args.only)
    OUT.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} and {OUT.relative_to(ROOT)}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
