"""Run the benchmarks and write ``docs/performance.md`` with tables and SVG figures (``make bench-report``).

Each benchmark runs as its own process with ``--json``; the JSON is kept next to the report
(``docs/performance/*.json``) so the page can be re-rendered without re-running (``--render-only``).
Figures are plain SVG written here (no plotting library needed); each states the transport it ran on
(the in-memory fake or the official SDK against the emulator in its own process) and the machine.

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
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
DOCS = ROOT / "docs"
OUT = DOCS / "performance"
PAGE = DOCS / "performance.md"
FAKE = "in-memory fake transport (simulated ack latency)"
SDK = "official SDK + local emulator in its own process"

SMALL: dict[str, list[str]] = {
    "pipelining": ["--warmup", "0.5", "--window", "2"],
    "emulator_throughput": ["--rows", "500000", "--repetitions", "3", "--no-json"],
    "scaling": ["--mb", "64"],
    "memory_100": ["--gb", "1", "--batch-mb", "100"],
    "memory_10": ["--gb", "1", "--batch-mb", "10"],
    "scaling_no_iceberg": ["--mb", "64", "--configs", "1x1,4x1", "--emulator-arg=--no-iceberg"],
}
FULL: dict[str, list[str]] = {
    "pipelining": [],
    "emulator_throughput": [],
    "scaling": ["--mb", "256"],
    "memory_100": ["--gb", "5", "--batch-mb", "100"],
    "memory_10": ["--gb", "5", "--batch-mb", "10"],
    "scaling_no_iceberg": ["--mb", "256", "--configs", "1x1,4x1", "--emulator-arg=--no-iceberg"],
}
SCRIPT = {
    "pipelining": "pipelining.py",
    "emulator_throughput": "emulator_throughput.py",
    "scaling": "scaling.py",
    "memory_100": "memory.py",
    "memory_10": "memory.py",
    "scaling_no_iceberg": "scaling.py",
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
        payload["_command"] = f"python benchmarks/{SCRIPT[name]} --json {' '.join(args)}".strip()
        (OUT / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


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


def scaling_section(data: dict[str, Any], where: str) -> list[str]:
    rows = data["results"]
    labels = [f"{r['streams']} x {r['tables']}" for r in rows]
    caption = f"{SDK}; {where}"
    throughput = write_figure(
        "scaling_throughput.svg",
        bar_chart(
            "Aggregate MB/s into the emulator (streams per table x tables)",
            caption,
            "MB/s (stamped Arrow bytes)",
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
        f"Transport: **{SDK}**; emulator settings: {data['emulator']}. {data['mb_per_table']} MB per "
        f"table and configuration, batches of {data['batch_rows']:,} rows; one pushing thread per table.",
        f"Command: `{data.get('_command', 'python benchmarks/scaling.py --json')}`.",
        "",
        "| streams per table | tables | MB/s durable | MB/s visible | p50 ack s | p99 ack s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['tables']} | {r['mb_per_s_durable']:.1f} | {r['mb_per_s_visible']:.1f} | "
            f"{r['p50_ack_s']:.3f} | {r['p99_ack_s']:.3f} |"
        )
    lines += ["", f"![throughput vs streams]({throughput})", "", f"![ack latency]({latency})", ""]
    return lines


def throughput_section(data: dict[str, Any], where: str) -> list[str]:
    bare, sink = data["bare"], data["sink"]
    figure = write_figure(
        "sink_vs_bare.svg",
        bar_chart(
            "Sink vs bare SDK loop, same stamped bytes (median of interleaved pairs)",
            f"{SDK}; {where}",
            "MB/s",
            ["bare SDK loop", "sink"],
            [("MB/s (median)", [bare["mb_per_s"]["median"], sink["mb_per_s"]["median"]])],
        ),
    )
    arrow_json = data.get("arrow_over_json")
    return [
        "## The sink's own cost: sink vs a bare SDK loop, like for like",
        "",
        f"Transport: **{SDK}**. {data['rows']:,} rows in batches of {data['batch_rows']:,}, "
        f"{data['repetitions']} interleaved bare/sink pairs, {data['stamped_bytes'] / 1e6:.1f} MB stamped "
        "per run (the bare loop sends the sink's own stamped batches).",
        f"Command: `{data.get('_command', 'python benchmarks/emulator_throughput.py --json')}`.",
        "",
        "| path | rows/s (median) | MB/s (median, min-max) | client CPU s per GB |",
        "|---|---:|---:|---:|",
        f"| bare SDK loop | {bare['rows_per_s']['median']:,.0f} | {bare['mb_per_s']['median']:.1f} "
        f"({bare['mb_per_s']['min']:.1f}-{bare['mb_per_s']['max']:.1f}) | "
        f"{bare['cpu_s_per_gb']['median']:.2f} |",
        f"| sink | {sink['rows_per_s']['median']:,.0f} | {sink['mb_per_s']['median']:.1f} "
        f"({sink['mb_per_s']['min']:.1f}-{sink['mb_per_s']['max']:.1f}) | "
        f"{sink['cpu_s_per_gb']['median']:.2f} |",
        "",
        f"sink over bare: **{data['sink_over_bare']:.2f}** (min {data['sink_over_bare_min']:.2f}, max "
        f"{data['sink_over_bare_max']:.2f}); client CPU per GB sink over bare: "
        f"**{data['client_cpu_per_gb_sink_over_bare']:.2f}**; Arrow over JSON: "
        + (f"{arrow_json:.1f}x" if arrow_json is not None else "not run (`--no-json`)")
        + f"; rows verified in Delta: {data['verified']}.",
        "",
        f"![sink vs bare]({figure})",
        "",
    ]


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
            "MB",
            series,
        ),
    )
    lines = [
        "## Client memory over a large stream",
        "",
        f"Transport: **{SDK}** (the runtime's daemon mode: the emulator is its own process, so RSS is the "
        "client's). The reader generates fresh batches and keeps none; in flight is bounded by "
        "`pool.max_inflight_bytes`, larger batches are sliced at `pool.max_batch_bytes`.",
        "",
        "| GB | batch MB | peak RSS MB | baseline RSS MB (imports) | peak Arrow MB | max_inflight_bytes "
        "| s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['gb']:g} | {r['batch_mb']:g} | {r['peak_rss_mb']:.0f} | {r['baseline_rss_mb']:.0f} | "
            f"{r['peak_arrow_mb']:.0f} | {r['max_inflight_bytes']:,} | {r['seconds']:.1f} |"
        )
    commands = "; ".join(f"`{r['_command']}`" for r in runs if "_command" in r)
    lines += [
        "",
        f"Commands: {commands}." if commands else "",
        "",
        f"![client memory]({figure})",
        "",
        "Where the RSS is (sampled during a run from `/proc/self/status`, `pa.total_allocated_bytes()`",
        "and glibc's `mallinfo2`): the baseline is the interpreter with pyarrow, deltalake, the SDK and",
        "the runtime imported (~110 MB of it mapped libraries). *Peak Arrow* is one input batch as the",
        "reader builds it. Each in-flight byte is then held twice on glibc's heap: the sink keeps the",
        "batch (its slices compacted, so they do not pin the input batch) until it is acknowledged, for",
        "re-submission after a stream failure and for its content digest; and the SDK serialises it to",
        "an IPC `bytes` object and copies that into its Rust core, which keeps it until the",
        "acknowledgement. The rest is glibc keeping freed batch-sized blocks: after the first free its",
        "dynamic mmap threshold rises to the batch size, later blocks come from the heap, and holes",
        "between blocks still in flight are not returned (~120 MB with 8 MiB slices and 64 MiB in",
        "flight, 50-90 MB with 4 MiB slices and 32 MiB).",
        "",
        "What brought 100 MB batches under 512 MB: every layer between the reader and the sink (row",
        "counting, resume slicing, the table's word on what was delivered) now lets go of an input batch",
        "before asking for the next, where two input batches used to be alive at once (~100 MB); and the",
        "defaults went from 64 MiB in flight and 8 MiB slices to 32 MiB and 4 MiB (half the in-flight",
        "copies, fewer unusable heap holes). Before, with the same commands: 719 MB (100 MB batches)",
        "and 535 MB (10 MB batches). The smaller defaults cost no throughput here (2 GB in 100 MB",
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
            f"{FAKE}; {machine()}",
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


def limits_section(default: dict[str, Any], without: dict[str, Any]) -> list[str]:
    by_config = {(r["streams"], r["tables"]): r for r in default["results"]}
    lines = [
        "## What limits the embedded default",
        "",
        f"Transport: **{SDK}**. The same runs with the emulator's Iceberg mirror off "
        f"(`{without.get('_command', 'python benchmarks/scaling.py --emulator-arg=--no-iceberg')}`):",
        "",
        "| streams x tables | MB/s durable, default | MB/s durable, no Iceberg mirror | "
        "MB/s visible, default | MB/s visible, no Iceberg mirror |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in without["results"]:
        base = by_config.get((r["streams"], r["tables"]))
        if base is None:
            continue
        lines.append(
            f"| {r['streams']} x {r['tables']} | {base['mb_per_s_durable']:.1f} | "
            f"{r['mb_per_s_durable']:.1f} | "
            f"{base['mb_per_s_visible']:.1f} | {r['mb_per_s_visible']:.1f} |"
        )
    lines += [
        "",
        "The emulator is one Python process: its gRPC handlers (decode, conform, WAL append and fsync),",
        "the materialiser (Parquet encoding and the Delta commit, every `time_to_table_s`) and the",
        "Iceberg mirror (one incremental conversion per Delta commit: only the new Parquet files are",
        "added, the table is not planned again) share one interpreter lock and, here, two cores with the",
        "client. WAL group commit is not the limit (one fsync covers every record written meanwhile);",
        "more streams help only until the processes are CPU-bound. Measured CPU per GB: the durable path",
        "in the emulator ~2.4 s (each frame copied once, from the gRPC message into the WAL; the append",
        "and fsync ~1.6 s of it, of which the kernel's page-cache copy ~1.1 s and the CRC-32 ~0.3 s);",
        "making the data visible ~4.5 s (Parquet, Snappy without dictionary pages, ~2.4 s, the Delta and",
        "Iceberg commits the rest; the records come from the WAL's in-memory tail, not read back from",
        "disk); the client (SDK serialisation and the sink) ~2-2.3 s. A smaller in-flight budget",
        "(`pool.max_inflight_bytes`, 32 MiB) keeps acknowledgement latency at a few hundred milliseconds",
        "instead of seconds of queue. What bounds the rate: with visibility keeping up, ~9 CPU s per GB",
        "on two cores is ~220 MB/s sustained (the visible column, ~170-180 MB/s). A burst only has to be",
        "durable first: the benchmark's client process (~3.2-3.7 CPU s per GB with its data generation",
        "and polling) plus the emulator's durable path (~2.4) bound it at 2 cores / ~6 s per GB, ~340",
        "MB/s, if nothing else runs; a 256 MB burst at ~300 MB/s lasts less than one materialiser period,",
        "so little Parquet encoding overlaps it (holding commits back while a table is busy measured no",
        "gain). Durable >= 300 MB/s with 4 streams is reached on an otherwise idle machine (311-318 MB/s",
        "in two runs of the default configurations) and not when other work shares the two cores (120-290",
        "MB/s).",
        "",
    ]
    return lines


def render() -> str:
    where = machine()
    lines = [
        "# Performance",
        "",
        "Generated by `make bench-report` (`benchmarks/report.py`) on "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. Machine: **{where}**.",
        "",
        "Client and emulator share the machine's cores, so these figures compare paths with one another on",
        "this machine; they are not Zerobus service figures. Acknowledgements are durable (the emulator",
        "fsyncs its WAL before acking); *visible* means committed to the Delta table. Each section names",
        "its transport: the **official SDK + the emulator in its own process**, or the **in-memory fake**.",
        "The JSON each section was rendered from is in `docs/performance/`.",
        "",
    ]
    scaling = load("scaling")
    if scaling:
        lines += scaling_section(scaling, where)
    throughput = load("emulator_throughput")
    if throughput:
        lines += throughput_section(throughput, where)
    memory = [m for m in (load("memory_100"), load("memory_10")) if m]
    if memory:
        lines += memory_section(memory, where)
    pipelining = load("pipelining")
    if pipelining:
        lines += pipelining_section(pipelining)
    without = load("scaling_no_iceberg")
    if scaling and without:
        lines += limits_section(scaling, without)
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
