# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The metric and label names a PromQL expression or a Grafana dashboard uses, and a check of them against the
exporters' published vocabulary (tests/repos/vocabulary/*.json, the same data the stub exporters are generated from).

The reader is deliberately strict: it knows PromQL's functions, aggregations and keywords, and an identifier it
cannot place (an unknown function, label_replace's label names hidden in strings) is an error, not a pass.
"""

from __future__ import annotations

import json
import re
import typing as t
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VOCABULARY = ROOT / "tests" / "repos" / "vocabulary"

# Prometheus adds these to every scraped series; `up` and the scrape_* series are Prometheus' own, per target.
PROMETHEUS_TARGET_LABELS = frozenset({"instance", "job"})
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
                               "scrape_series_added"})

AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                          "quantile", "limitk", "limit_ratio"})
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time", "ceil", "changes",
    "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "deg", "delta", "deriv", "double_exponential_smoothing", "end", "exp", "floor", "holt_winters",
    "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "hour", "idelta", "increase", "irate",
    "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin",
    "sinh", "sort", "sort_desc", "sqrt", "start", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "vector", "year"})
# Functions whose label names travel inside strings: refused rather than half-read.
STRING_LABEL_FUNCTIONS = frozenset({"label_replace", "label_join", "sort_by_label", "sort_by_label_desc"})
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
OTHER_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<variable>\$\{[^}]*\}|\$\w+)
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)(?:ms|s|m|h|d|w|y)?(?:\d+(?:ms|s|m|h|d|w|y))*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[=<>+\-*/%^,(){}@])
""", re.X)
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PromQLError(ValueError):
    """An expression the reader refuses: not PromQL it can read with certainty."""


class Names(t.NamedTuple):
    metrics: set[str]
    # (metric or None, label): a label in a selector belongs to that selector's metric
    selector_labels: set[tuple[str | None, str]]
    # labels named in by/without/on/ignoring/group_left/group_right lists
    clause_labels: set[str]


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromQLError(f"cannot read {expr!r} at {expr[pos:pos + 20]!r}")
        pos = match.end()
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
    return out


def names(expr: str) -> Names:
    """The metrics and labels one PromQL expression uses."""
    if not isinstance(expr, str) or not expr.strip():
        raise PromQLError(f"not an expression: {expr!r}")
    toks = tokens(expr)
    found = Names(set(), set(), set())
    i = 0
    depth = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ("", "")
        if kind == "ident":
            word = text.lower()
            if word in LABEL_LIST_KEYWORDS and nxt == ("op", "("):
                i = _label_list(toks, i + 2, found.clause_labels, expr)
                continue
            if word in LABEL_LIST_KEYWORDS or word in OTHER_KEYWORDS:
                i += 1
                continue
            if text in STRING_LABEL_FUNCTIONS:
                raise PromQLError(f"{text}() names labels inside strings, which this check cannot verify: {expr!r}")
            # PromQL reads aggregation operators and keywords in any case; function names are case-sensitive.
            if word in AGGREGATIONS and (nxt == ("op", "(") or nxt[1].lower() in ("by", "without")):
                i += 1
                continue
            if nxt == ("op", "("):
                if text not in FUNCTIONS:
                    raise PromQLError(f"unknown function {text}() in {expr!r}")
                i += 1
                continue
            if not _NAME.fullmatch(text):
                raise PromQLError(f"not a metric name: {text!r} in {expr!r}")
            found.metrics.add(text)
            if nxt == ("op", "{"):
                i = _matchers(toks, i + 2, text, found, expr)
                continue
            i += 1
            continue
        if (kind, text) == ("op", "{"):
            i = _matchers(toks, i + 1, None, found, expr)
            continue
        if (kind, text) == ("op", "("):
            depth += 1
        elif (kind, text) == ("op", ")"):
            depth -= 1
            if depth < 0:
                raise PromQLError(f"unbalanced parentheses in {expr!r}")
        elif (kind, text) == ("op", "}"):
            raise PromQLError(f"unbalanced braces in {expr!r}")
        i += 1
    if depth:
        raise PromQLError(f"unbalanced parentheses in {expr!r}")
    return found


def _label_list(toks, i, into: set[str], expr: str) -> int:
    while i < len(toks) and toks[i] != ("op", ")"):
        kind, text = toks[i]
        if kind == "ident" and _LABEL.fullmatch(text):
            into.add(text)
        elif (kind, text) != ("op", ","):
            raise PromQLError(f"not a label name in a label list: {text!r} in {expr!r}")
        i += 1
    if i >= len(toks):
        raise PromQLError(f"unclosed label list in {expr!r}")
    return i + 1


def _matchers(toks, i, metric: str | None, found: Names, expr: str) -> int:
    while i < len(toks) and toks[i] != ("op", "}"):
        kind, text = toks[i]
        if kind == "ident" and _LABEL.fullmatch(text):
            if i + 2 >= len(toks) or toks[i + 1][1] not in ("=", "!=", "=~", "!~") or toks[i + 2][0] != "string":
                raise PromQLError(f"not a label matcher at {text!r} in {expr!r}")
            if text == "__name__":
                value = toks[i + 2][1][1:-1]
                if toks[i + 1][1] != "=" or not _NAME.fullmatch(value):
                    raise PromQLError(f"a __name__ matcher other than one exact name: {expr!r}")
                found.metrics.add(value)
                metric = value
            else:
                found.selector_labels.add((metric, text))
            i += 3
        elif kind == "string" and metric is None:
            raise PromQLError(f"a quoted metric name in braces: {expr!r}")
        elif (kind, text) == ("op", ","):
            i += 1
        else:
            raise PromQLError(f"not a label matcher at {text!r} in {expr!r}")
    if i >= len(toks):
        raise PromQLError(f"unclosed selector in {expr!r}")
    return i + 1


# --- the vocabulary --------------------------------------------------------------------------------------------

def load(name: str) -> dict[str, t.Any]:
    return json.loads((VOCABULARY / f"{name}.json").read_text(encoding="utf-8"))


def dcgm_labels(collectors: list[dict[str, str]]) -> dict[str, set[str]]:
    """Metric -> its labels, for dcgm-exporter run with these collectors rows (the role's CSV)."""
    vocab = load("dcgm-exporter")
    known = {**vocab["field_metrics"], **vocab["optional_metrics"], **vocab["metrics"]}
    label_fields = {**vocab["optional_label_fields"], **vocab["label_fields"]}
    extra = {row["field"] for row in collectors if row["type"] == "label"}
    unknown = {row["field"] for row in collectors} - set(known) - set(label_fields)
    if unknown or extra - set(label_fields):
        raise PromQLError(f"collectors outside dcgm-exporter {vocab['version']}'s vocabulary: {sorted(unknown | (extra - set(label_fields)))}")
    base = set(vocab["labels"]) | set(vocab["mig_labels"]) | extra
    return {row["field"]: base | set(vocab["metric_labels"].get(row["field"], [])) for row in collectors if row["type"] != "label"}


def nvidia_gpu_exporter_labels() -> dict[str, set[str]]:
    vocab = load("nvidia_gpu_exporter")
    out = {name: set(vocab["gpu_labels"]) for name in vocab["gpu_metrics"]}
    out[vocab["info_metric"]["name"]] = set(vocab["info_metric"]["labels"])
    out.update((name, set()) for name in vocab["exporter_metrics"])
    return out


def check(expr: str, exporters: dict[str, dict[str, set[str]]], target_labels: set[str],
          legend: str | None = None) -> list[str]:
    """Every name `expr` (and its legend) uses that no exporter publishes, as readable problems; [] when clean.

    exporters: exporter -> metric -> its labels. One expression reads one exporter's metrics (and Prometheus' own
    per-target series); every series also has the target labels (instance, job, the file_sd labels).
    """
    try:
        used = names(expr)
    except PromQLError as exc:
        return [str(exc)]
    problems = []
    owners = {m: [name for name, metrics in exporters.items() if m in metrics] for m in used.metrics}
    for metric, where in sorted(owners.items()):
        if not where and metric not in PROMETHEUS_SERIES:
            problems.append(f"metric {metric} is published by no exporter ({', '.join(sorted(exporters))}): {expr!r}")
    exporters_used = {w for where in owners.values() for w in where}
    if len(exporters_used) > 1:
        problems.append(f"one expression mixes exporters {sorted(exporters_used)}: {expr!r}")
    common = set(PROMETHEUS_TARGET_LABELS) | set(target_labels)

    def labels_of(metric: str | None) -> set[str]:
        if metric is None or metric in PROMETHEUS_SERIES:
            return common
        return common | {label for e in exporters_used for label in exporters[e].get(metric, set())}

    all_labels = common | {label for m in used.metrics for label in labels_of(m)}
    for metric, label in sorted(used.selector_labels, key=str):
        if label not in (labels_of(metric) if metric else all_labels):
            problems.append(f"label {label} is not on {metric or 'any series of this expression'}: {expr!r}")
    for label in sorted(used.clause_labels - all_labels):
        problems.append(f"label {label} (by/on/... list) is on no series of {expr!r}")
    for label in sorted(set(re.findall(r"\{\{\s*([^}\s]*)\s*\}\}", legend or "")) - all_labels):
        problems.append(f"legend label {label} is on no series of {expr!r}")
    return problems


def result_labels(expr: str) -> set[str] | None:
    """The labels an expression's result keeps when it is one aggregation `agg by (...) (...)` or `agg (...) by (...)`;
    None when the expression is not of that shape (its series keep their labels)."""
    toks = tokens(expr)
    if len(toks) < 4 or toks[0][0] != "ident" or toks[0][1].lower() not in AGGREGATIONS:
        return None

    def close(i: int) -> int:
        depth = 0
        for j in range(i, len(toks)):
            depth += {"(": 1, ")": -1}.get(toks[j][1], 0) if toks[j][0] == "op" else 0
            if depth == 0:
                return j
        raise PromQLError(f"unbalanced parentheses in {expr!r}")

    if toks[1][1].lower() == "by" and toks[2] == ("op", "("):
        listed: set[str] = set()
        body = _label_list(toks, 3, listed, expr)
        return listed if toks[body] == ("op", "(") and close(body) == len(toks) - 1 else None
    if toks[1] == ("op", "("):
        end = close(1)
        if end + 2 < len(toks) and toks[end + 1][1].lower() == "by" and toks[end + 2] == ("op", "("):
            listed = set()
            return listed if _label_list(toks, end + 3, listed, expr) == len(toks) else None
    return None


def dashboard_problems(board: dict[str, t.Any], exporters: dict[str, dict[str, set[str]]], target_labels: set[str]) -> list[str]:
    """Every name a Grafana dashboard uses that no exporter publishes: each panel target's expr and legendFormat
    (nested rows included) and each templating query (label_values(metric, label) only)."""
    problems = []
    queries = 0

    def panels(items):
        nonlocal queries
        for panel in items or []:
            for target in panel.get("targets", []):
                queries += 1
                expr, legend = target.get("expr"), target.get("legendFormat")
                found = check(expr, exporters, target_labels, legend)
                if not found and legend:
                    kept = result_labels(expr)
                    legend_labels = set(re.findall(r"\{\{\s*([^}\s]*)\s*\}\}", legend))
                    if kept is not None and legend_labels - kept:
                        found = [f"legend labels {sorted(legend_labels - kept)} are aggregated away by {expr!r}"]
                problems.extend(f"panel {panel.get('title')!r}: {p}" for p in found)
            panels(panel.get("panels"))

    panels(board.get("panels"))
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        queries += 1
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        # Grafana shows `definition` and runs `query`; both are read.
        for text in [query] + ([var["definition"]] if "definition" in var else []):
            match = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", text if isinstance(text, str) else "")
            if match is None:
                problems.append(f"variable {var.get('name')!r}: not a label_values(metric, label) query: {text!r}")
                continue
            # label_values(expr, label) asks for that label of the expression's series, as count by (label) (expr) keeps it.
            problems.extend(f"variable {var.get('name')!r}: {p}"
                            for p in check(f"count by ({match.group(2)}) ({match.group(1)})", exporters, target_labels))
    if queries == 0:
        problems.append("the dashboard has no query at all")
    return problems
