"""docs/alerts.yml and docs/grafana-dashboard.json name only metrics and labels the package exports.

promtool is not available, so the checker here is a small PromQL reader: it strips strings and range
selectors, reads label matchers and grouping clauses, and treats every other bare identifier as a
metric name (functions must be known PromQL functions, so a typo cannot hide as a "function").
Metrics come from a fresh ``SinkMetrics`` registry, in the exposition forms Prometheus stores:
``<counter>_total``, ``<histogram>_bucket`` (plus ``le``), ``_count`` and ``_sum``, ``<gauge>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from zerobus_orchestration.metrics import SinkMetrics

DOCS = Path(__file__).resolve().parents[3] / "docs"

FUNCTIONS = frozenset(
    {
        "abs", "avg", "avg_over_time", "ceil", "clamp_max", "clamp_min", "count", "count_over_time",
        "delta", "deriv", "floor", "histogram_quantile", "idelta", "increase", "irate", "label_replace",
        "max", "max_over_time", "min", "min_over_time", "quantile", "rate", "round", "scalar", "sort",
        "sort_desc", "sum", "sum_over_time", "topk", "bottomk", "vector", "absent", "changes", "resets",
    }
)  # fmt: skip
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?")


def exported() -> dict[str, tuple[str, frozenset[str]]]:
    """Every sample name the package exports: its metric family and the labels it carries."""
    metrics = SinkMetrics(CollectorRegistry())
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for metric in vars(metrics).values():
        if not isinstance(metric, Counter | Gauge | Histogram):
            continue
        name = metric._name  # prometheus_client keeps the declared name and labels only privately
        labels = frozenset(metric._labelnames)
        if isinstance(metric, Counter):
            out[f"{name}_total"] = (name, labels)
        elif isinstance(metric, Histogram):
            out[f"{name}_bucket"] = (name, labels | {"le"})
            out[f"{name}_count"] = (name, labels)
            out[f"{name}_sum"] = (name, labels)
        else:
            out[name] = (name, labels)
    return out


def _balanced(text: str, start: int) -> str | None:
    """The text inside the parentheses opening at ``start`` (after spaces), or None."""
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] != "(":
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def _identifiers(text: str, found: list[str]) -> list[str]:
    """Metric names in ``text`` (grouping clauses removed); unknown functions go to ``found``."""
    metrics: list[str] = []
    for match in IDENT.finditer(GROUPING.sub(" ", text)):
        word = match.group(0).rstrip("( \t\n")
        if match.group(1):  # followed by "(": a function or aggregation
            if word not in FUNCTIONS:
                found.append(f"unknown PromQL function {word!r}")
        elif word.lower() not in KEYWORDS:
            metrics.append(word)
    return metrics


def problems(expr: str, known: dict[str, tuple[str, frozenset[str]]]) -> list[str]:
    """What in ``expr`` is not exported: unknown metrics, functions, matcher or grouping labels."""
    found: list[str] = []
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values (Grafana $variables included)
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors and subqueries
    for match in SELECTOR.finditer(text):
        metric, body = match.group(1), match.group(2)
        if metric is None:
            found.append(f"selector without a metric name: {match.group(0)!r}")
            continue
        for label in MATCHER.findall(body):
            if metric in known and label not in known[metric][1]:
                found.append(f"{metric} has no label {label!r}")
    text = SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", text)
    metrics = _identifiers(text, found)
    for metric in metrics:
        if metric not in known:
            found.append(f"metric {metric!r} is not exported by zerobus_orchestration.metrics")
    if not metrics:
        found.append("the expression names no metric")
    for match in GROUPING.finditer(text):
        # ``sum by (labels) (arg)``: the labels must be on every metric inside ``arg``.
        scope = _balanced(text, match.end())
        in_scope = metrics if scope is None else _identifiers(scope, [])
        for label in filter(None, (lab.strip() for lab in match.group(2).split(","))):
            for metric in in_scope:
                if metric in known and label not in known[metric][1]:
                    found.append(f"grouping label {label!r} is not on {metric}")
    return found


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DOCS / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DOCS / "grafana-dashboard.json").read_text())
    return loaded


def panel_exprs(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for panel in panels:
        yield from panel_exprs(panel.get("panels", []))  # rows nest panels
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


LABEL_VALUES = re.compile(r"^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")


def test_every_alert_expression_names_exported_metrics_and_labels() -> None:
    known = exported()
    rules = alert_rules()
    bad = {rule["alert"]: problems(rule["expr"], known) for rule in rules}
    assert {name: found for name, found in bad.items() if found} == {}
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["runbook"], rule["alert"]


def test_the_alerts_the_issue_names_are_there() -> None:
    by_name = {rule["alert"]: rule for rule in alert_rules()}
    coalesce = by_name["ZerobusAckCoalesceRatioLow"]
    assert "histogram_quantile(0.5" in coalesce["expr"] and ") < 2" in coalesce["expr"]
    assert "zerobus_ack_coalesce_ratio_bucket[5m]" in coalesce["expr"] and coalesce["for"] == "5m"
    assert "zerobus_ack_lane_poisoned_total" in by_name["ZerobusStreamPoisoned"]["expr"]
    assert "deriv(zerobus_pending_offsets" in by_name["ZerobusPendingClimbing"]["expr"]
    latency = by_name["ZerobusDeliveryLatencyP99High"]["expr"]
    assert "histogram_quantile(0.99" in latency and "zerobus_delivery_latency_seconds_bucket" in latency
    unreconcilable = by_name["ZerobusTypeUnreconcilable"]["expr"]
    assert "zerobus_type_unreconcilable_total" in unreconcilable and "column" in unreconcilable


def test_every_dashboard_query_names_exported_metrics_and_labels() -> None:
    known = exported()
    board = dashboard()
    exprs = list(panel_exprs(board["panels"]))
    assert len(exprs) >= 10
    bad = {f"{title}: {expr}": problems(expr, known) for title, expr in exprs}
    assert {where: found for where, found in bad.items() if found} == {}
    # Every metric family the package exports is on the dashboard (a new metric needs a panel).
    shown = {known[m][0] for _, expr in exprs for m in _identifiers(expr, []) if m in known}
    assert {family for family, _ in known.values()} - shown == set()
    for variable in board["templating"]["list"]:
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = LABEL_VALUES.match(query)
        assert match is not None, query
        selector, label = match.groups()
        assert problems(selector, known) == [], query
        metric = selector.split("{")[0]
        assert label in known[metric][1], query


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("rate(zerobus_nope_total[5m])", "metric 'zerobus_nope_total' is not exported"),
        ('zerobus_pending_offsets{tabel="x"}', "has no label 'tabel'"),
        ("sum by (table, kind) (zerobus_pending_offsets)", "grouping label 'kind'"),
        ("histogram_quantile(0.5, sum by (le) (rate(zerobus_ack_coalesce_ratio[5m])))", "not exported"),
        ("ratee(zerobus_rows_submitted_total[5m])", "unknown PromQL function 'ratee'"),
        ("sum by (table, le) (rate(zerobus_delivery_latency_seconds_count[5m]))", "grouping label 'le'"),
    ],
)
def test_the_checker_catches_what_it_is_for(expr: str, expected: str) -> None:
    found = problems(expr, exported())
    assert any(expected in p for p in found), found
