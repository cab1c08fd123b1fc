"""The benchmark scripts do not rot: each runs at a tiny size (``--smoke``) and prints the JSON shape the
docs and reports read. Keys and types only: a smoke run's figures mean nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
NUMBER = (int, float)
pytestmark = pytest.mark.slow  # each runs a benchmark script in a process of its own


def run_benchmark(script: str, *args: str) -> dict[str, Any]:
    # The official SDK tunnels even 127.0.0.1 through *_proxy variables; ZEROBUS_* would reconfigure it.
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("ZEROBUS_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-4000:]}"
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def assert_shape(value: Any, shape: Any, where: str) -> None:
    """``shape``: a type (or tuple of types), or a dict of key -> shape, which must match exactly."""
    if isinstance(shape, dict):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        assert set(value) == set(shape), f"{where}: keys {sorted(value)} != {sorted(shape)}"
        for key, inner in shape.items():
            assert_shape(value[key], inner, f"{where}.{key}")
    else:
        assert _is(value, shape), f"{where}: {value!r} is not {shape}"


def _is(value: Any, shape: type | tuple[type, ...]) -> bool:
    # bool is an int subclass: a flag where a figure belongs (or back) is a shape change.
    kinds = shape if isinstance(shape, tuple) else (shape,)
    return bool in kinds if isinstance(value, bool) else isinstance(value, kinds)


SPREAD = {"median": NUMBER, "min": NUMBER, "max": NUMBER}
PATH = {"rows_per_s": SPREAD, "mb_per_s": SPREAD, "cpu_s_per_gb": SPREAD}
EMULATOR_THROUGHPUT = {
    "rows": int,
    "batch_rows": int,
    "cpus": int,
    "repetitions": int,
    "emulator": str,
    "schema": str,
    "stamped_bytes": int,
    "payload_bytes": int,
    "arrow_rows_per_s": NUMBER,
    "arrow_mb_per_s": NUMBER,
    "json_rows_per_s": NUMBER,
    "json_mb_per_s": NUMBER,
    "json_ingest_rows_per_s": NUMBER,
    "json_encode_s": NUMBER,
    "arrow_over_json": NUMBER,
    "bare": PATH,
    "sink": PATH,
    "sink_over_bare": NUMBER,
    "sink_over_bare_min": NUMBER,
    "sink_over_bare_max": NUMBER,
    "client_cpu_per_gb_sink_over_bare": NUMBER,
    "sink_coverage": bool,
    "verified": bool,
}
PIPELINING_RESULT = {
    "latency_s": NUMBER,
    "streams": int,
    "ack_channel_capacity": int,
    "sink_batches_per_s": NUMBER,
    "inline_batches_per_s": NUMBER,
    "bound_batches_per_s": NUMBER,
    "fraction_of_bound": NUMBER,
    "speedup_vs_inline": NUMBER,
    "speedup_per_stream": NUMBER,
    "meets_target": (bool, type(None)),
    "coalesce_ratio_mean": (*NUMBER, type(None)),
}


@pytest.mark.integration
def test_emulator_throughput_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("emulator_throughput.py", "--smoke", "--json")
    assert_shape(result, EMULATOR_THROUGHPUT, "emulator_throughput")
    assert result["verified"] is True  # every row the bare loops and the sink sent reached Delta
    assert result["repetitions"] >= 2  # medians over interleaved pairs, not one run


@pytest.mark.integration
def test_emulator_throughput_decimal_schema_smoke_lands_every_row() -> None:
    # The bare loop sends the sink's own batches, decimals as text: a strict emulator takes them only in
    # the wire schema, so this fails if either side sends native decimal128.
    result = run_benchmark("emulator_throughput.py", "--smoke", "--json", "--schema", "decimals", "--no-json")
    assert result["schema"] == "decimals" and result["verified"] is True
    assert result["json_rows_per_s"] is None


def test_sink_ablation_smoke_prints_every_variant() -> None:
    out = run_benchmark("sink_ablation.py", "--smoke", "--json")
    variants = ["bare", "sink", "no-digests", "no-coverage", "one-stream"]
    spread = {**SPREAD, "runs": list}
    assert_shape(
        out, {"schema": str, "rows": int, "rounds": int, "cpu_ms_per_1m_rows": dict}, "sink_ablation"
    )
    assert_shape(out["cpu_ms_per_1m_rows"], dict.fromkeys(variants, spread), "cpu_ms_per_1m_rows")
    assert all(len(f["runs"]) == out["rounds"] for f in out["cpu_ms_per_1m_rows"].values())


def test_pipelining_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("pipelining.py", "--smoke", "--json")
    assert_shape(result, {"transport": str, "results": list}, "pipelining")
    assert len(result["results"]) == 3
    for i, row in enumerate(result["results"]):
        assert_shape(row, PIPELINING_RESULT, f"pipelining.results[{i}]")


MEMORY = {
    "gb": NUMBER,
    "batch_mb": NUMBER,
    "batches": int,
    "rows": int,
    "input_mb": NUMBER,
    "seconds": NUMBER,
    "peak_rss_mb": NUMBER,
    "peak_rss_mib": NUMBER,
    "baseline_rss_mb": NUMBER,
    "peak_arrow_mb": NUMBER,
    "rss_over_time": list,
    "max_inflight_bytes": int,
    "max_batch_bytes": int,
    "emulator": str,
    "machine": str,
}


@pytest.mark.integration
def test_memory_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("memory.py", "--smoke", "--json")
    assert_shape(result, MEMORY, "memory")
    assert result["batches"] == 5  # the generated reader really streamed through the runtime
    # One unit: MB = 10^6 bytes, MiB beside it (ru_maxrss is KiB; MB and MiB differ by 4.9 %).
    assert result["peak_rss_mb"] == pytest.approx(result["peak_rss_mib"] * 1.048576, abs=0.2)


CRASH_RESUME_RUN = {
    "mode": str,
    "rows": int,
    "kills": int,
    "missing": int,
    "duplicates": int,
    "duplicate_fraction": NUMBER,
    "unexpected_positions": int,
    "duplicate_ranges": list,
    "final_rows_written": int,
    "final_rows_skipped": int,
    "final_rows_resent_after_crash": int,
    "seconds": NUMBER,
}


@pytest.mark.integration
def test_crash_resume_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("crash_resume.py", "--smoke", "--json")
    assert_shape(
        result,
        {
            "rows": int,
            "kills": int,
            "batch_rows": int,
            "missing": int,
            "duplicates": int,
            "duplicate_fraction": NUMBER,
            "meets_target": bool,
            "runs": list,
        },
        "crash_resume",
    )
    assert [run["mode"] for run in result["runs"]] == ["in_process", "daemon"]
    for i, run in enumerate(result["runs"]):
        assert_shape(run, CRASH_RESUME_RUN, f"crash_resume.runs[{i}]")
    assert result["missing"] == 0  # a resume never loses a row, whatever the size


SCALING_ROW = {
    "streams": int,
    "tables": int,
    "mb": NUMBER,
    "mb_per_s_durable": NUMBER,
    "mb_per_s_visible": NUMBER,
    "p50_ack_s": NUMBER,
    "p99_ack_s": NUMBER,
    "durable_s": NUMBER,
    "visible_s": NUMBER,
    "client_cpu_s_per_gb": NUMBER,
    "emulator_cpu_s_per_gb_durable": NUMBER,
    "emulator_cpu_s_per_gb_visible": NUMBER,
    "repetitions": int,
    "mb_per_s_durable_min": NUMBER,
    "mb_per_s_durable_max": NUMBER,
    "mb_per_s_visible_min": NUMBER,
    "mb_per_s_visible_max": NUMBER,
}


@pytest.mark.integration
def test_scaling_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("scaling.py", "--smoke", "--json")
    assert_shape(
        result,
        {
            "transport": str,
            "emulator": str,
            "machine": str,
            "cpus": int,
            "batch_rows": int,
            "mb_per_table": NUMBER,
            "results": list,
        },
        "scaling",
    )
    for i, row in enumerate(result["results"]):
        assert_shape(row, SCALING_ROW, f"scaling.results[{i}]")
    # 1, 2 and 4 streams into one table, and two tables at once: every row visible in Delta.
    assert {(r["streams"], r["tables"]) for r in result["results"]} >= {(1, 1), (2, 1), (4, 1), (1, 2)}


@pytest.mark.integration
def test_scaling_repetitions_report_each_configuration_once_with_its_spread() -> None:
    result = run_benchmark("scaling.py", "--smoke", "--json", "--configs", "1x1", "--repetitions", "2")
    (row,) = result["results"]
    assert_shape(row, SCALING_ROW, "scaling.results[0]")
    assert row["repetitions"] == 2  # both runs, reported as one row: their median
    for rate in ("mb_per_s_durable", "mb_per_s_visible"):
        assert row[f"{rate}_min"] <= row[rate] <= row[f"{rate}_max"]


ISOLATION_RUN = {
    "scenario": str,
    "stream_mb_s": list,
    "healthy_mb_s": NUMBER,
    "push_s": NUMBER,
    "inflight_peak_mb": NUMBER,
    "rss_growth_mb": NUMBER,
}


@pytest.mark.integration
def test_isolation_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("isolation.py", "--smoke", "--json")
    assert_shape(
        result,
        {
            "transport": str,
            "machine": str,
            "cpus": int,
            "mb_per_scenario": NUMBER,
            "batch_mb": NUMBER,
            "delay_s": NUMBER,
            "per_stream_mb_s_limit": NUMBER,
            "streams": int,
            "max_inflight_mb": NUMBER,
            "repetitions": int,
            "baseline_mb_s": NUMBER,
            "delayed_healthy_mb_s": NUMBER,
            "ratio": NUMBER,
            "ratio_min": NUMBER,
            "ratio_max": NUMBER,
            "inflight_peak_mb": NUMBER,
            "rss_growth_mb": NUMBER,
            "rss_bound_mb": NUMBER,
            "runs": list,
        },
        "isolation",
    )
    assert [run["scenario"] for run in result["runs"]] == ["baseline", "delayed"]
    for i, run in enumerate(result["runs"]):
        assert_shape(run, ISOLATION_RUN, f"isolation.runs[{i}]")
        assert len(run["stream_mb_s"]) == result["streams"] == 2


def test_parquet_codec_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("parquet_codec.py", "--mb", "1", "--repetitions", "1", "--json")
    row = {
        "codec": str,
        "cpu_s_per_gb": NUMBER,
        "wall_s_per_gb": NUMBER,
        "parquet_bytes_per_arrow_byte": NUMBER,
        "cpu_ratio_to_snappy": NUMBER,
    }
    assert_shape({k: v for k, v in result.items() if k != "results"}, {"arrow_mb": NUMBER}, "parquet_codec")
    for i, found in enumerate(result["results"]):
        assert_shape(found, row, f"parquet_codec.results[{i}]")
    assert [r["codec"] for r in result["results"]] == ["snappy", "zstd-1", "zstd-3"]


S_SPREAD = {"median": NUMBER, "min": NUMBER, "max": NUMBER}
HISTORY_TABLE = {
    "rows": int,
    "runs": int,
    "files": int,
    "table_mb": NUMBER,
    "build_s": NUMBER,
    "mirror_s": NUMBER,
    "catch_up_unbounded_s": S_SPREAD,
    "catch_up_bounded_s": S_SPREAD,
    "readback_unbounded_s": S_SPREAD,
    "readback_bounded_s": S_SPREAD,
    "catch_up_unbounded_over_smallest": NUMBER,
    "catch_up_bounded_over_smallest": NUMBER,
    "readback_unbounded_over_smallest": NUMBER,
    "readback_bounded_over_smallest": NUMBER,
}
COVERAGE_YEAR = {
    "daily_compaction": bool,
    "partitions": int,
    "record_s": NUMBER,
    "file_mb": NUMBER,
    "open_and_read_one_partition_s": S_SPREAD,
}


def test_history_smoke_prints_its_json_shape() -> None:
    """Its catch-ups and read-backs check what they found (the run's rows, once) or the script fails."""
    result = run_benchmark("history.py", "--smoke", "--json")
    for table in result["tables"]:
        assert_shape(table, HISTORY_TABLE, "history.tables")
    runs = result["coverage"]["runs"]
    for run in runs:
        assert_shape(run, COVERAGE_YEAR, "history.coverage")
    assert [run["daily_compaction"] for run in runs] == [False, True]


def test_ipc_compression_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("ipc_compression.py", "--smoke", "--json")
    assert [c["codec"] for c in result["codecs"]] == ["none", "lz4_frame", "zstd"]
    for codec in result["codecs"]:
        assert_shape(
            codec,
            {
                "codec": str,
                "wire_bytes": int,
                "wire_per_payload_byte": NUMBER,
                "wire_per_stamped_byte": NUMBER,
                "client_cpu_s_per_payload_gb": S_SPREAD,
                "payload_mb_per_s": S_SPREAD,
            },
            "ipc_compression.codecs",
        )
    none, lz4, zstd = (c["wire_bytes"] for c in result["codecs"])
    assert zstd < none and lz4 < none  # the proxy counted the codecs' smaller bodies: compression acted


def test_input_check_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("input_check.py", "--smoke", "--json")
    spread = {"median_s": NUMBER, "min_s": NUMBER, "max_s": NUMBER}
    assert [f["format"] for f in result["formats"]] == ["parquet", "csv"]
    for fmt in result["formats"]:
        assert_shape(
            fmt,
            {
                "format": str,
                "rows": int,
                "file_mb": NUMBER,
                "payload_mb": NUMBER,
                "checked": spread,
                "streamed": spread,
                "check": spread,
                "checked_over_streamed": NUMBER,
                "check_payload_mb_per_s": NUMBER,
            },
            "input_check.formats",
        )


def test_rerun_decision_smoke_prints_its_json_shape() -> None:
    result = run_benchmark("rerun_decision.py", "--smoke", "--json")
    assert_shape(
        result,
        {
            "commits": int,
            "rows_per_commit": int,
            "repetitions": int,
            "before_ms": SPREAD,
            "quiet_ms": SPREAD,
            "quiet_recent_ms": SPREAD,
            "ratio_quiet": NUMBER,
            "ratio_quiet_recent": NUMBER,
        },
        "rerun_decision",
    )
