"""ops/grafana/statewright.json: a Grafana dashboard model whose every query names only metrics
the app exports.

The exported names are not a list written here: they are collected from real registries
after a workflow of every kind of outcome went through an engine with its metrics attached and
a worker with its metrics endpoint (a start, a retry, a step, a refusal, an event not applied,
a recovery, a stuck workflow). Whether every query also runs on a real Prometheus is checked by
tests/acceptance/test_prometheus.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from statewright import Engine, SQLiteStore
from statewright.engine import Worker
from statewright.errors import IllegalTransition
from statewright.observability.metrics import attach_metrics
from statewright.observability.worker_http import WorkerEndpoint
from tests.acceptance.apps.metered import TYPES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "statewright.json"
PROMETHEUS_OWN = frozenset({"up"})
"""Series Prometheus itself writes for every target (not exported by the app)."""
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
"""Grafana's interval variables, as a query sent to Prometheus would have them."""
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "inf", "nan", "atan2"}
)


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())  # a collapsed row holds its panels


def exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, expr)`` of every panel target and every query variable."""
    out = [
        (f"panel {p['title']!r} target {t['refId']}", t["expr"])
        for p in panels(dashboard)
        for t in p.get("targets", ())
    ]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            # label_values(selector, label): the selector is the query Grafana sends.
            found = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert found, f"variable {var['name']}: not label_values(selector, label): {query}"
            out.append((f"variable {var['name']!r}", found.group(1)))
    return out


def substituted(expr: str) -> str:
    """The expression as Grafana sends it with every variable at "All" (``.*``)."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\w+", ".*", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects.

    Hand-written, because no PromQL parser is packaged for Python (the acceptance test has a
    real Prometheus parse each one). What is not a metric name is removed first: string
    literals, label matchers ``{...}``, ranges ``[...]``, the label lists of ``by``, ``without``,
    ``on``, ``ignoring`` and ``group_*``; then every identifier left that is not a function
    (followed by ``(``), a keyword or a number is a metric name.
    """
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e, flags=re.I
    )
    names = set()
    for found in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", e):
        name, call = found.group(1), found.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def exported_names(*registries: CollectorRegistry) -> set[str]:
    """Every series name the registries expose: the sample names collected, plus, per family,
    the names of its type (a labelled family with no sample yet still names its series)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "info": ("_info",),
        "gauge": ("",),
    }
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.update(s.name for s in family.samples)
            names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


async def _run_everything(tmp_path: Path) -> set[str]:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), TYPES) as engine:
        metrics = attach_metrics(engine)
        worker = Worker(engine, poll_interval=0.02)
        endpoint = WorkerEndpoint(engine, worker, port=0, metrics=metrics)
        endpoint.start()
        try:
            await engine.start("metered", workflow_id="done")
            await engine.start("metered", workflow_id="held")
            await engine.send("held", "hold")
            try:
                await engine.send("held", "finish")
            except IllegalTransition:
                pass
            else:
                raise AssertionError("finish from paused must be refused")
            await engine.send("held", "hold", if_allowed=True)  # not applied
            await asyncio.sleep(0.05)  # past the paused state's stuck threshold
            await metrics.refresh()
            names = exported_names(metrics.registry)
            await engine.send("held", "resume")  # a recovery
            for _ in range(100):
                await worker.run_until_idle()
                states = [(await engine.get(i)).state for i in ("done", "held")]
                if states == ["done", "done"]:
                    break
                await asyncio.sleep(0.02)
            await metrics.refresh()
            return names | exported_names(metrics.registry)
        finally:
            endpoint.close()


def test_the_dashboard_is_a_grafana_model_with_a_prometheus_datasource_variable() -> None:
    d = load()
    assert d["schemaVersion"] >= 36 and d["uid"] and d["title"] == "statewright"
    assert d["id"] is None  # importable into any Grafana
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids))
    for p in panels(d):
        grid = p["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
    titles = " | ".join(p["title"].lower() for p in panels(d))
    for wanted in (
        "workflows by state",
        "transitions per second",
        "refusals per second",
        "time in state",
        "retries",
        "mean time to recover",
        "step durations",
        "stuck",
        "event loop lag",
        "liveness",
    ):
        assert wanted in titles


def test_the_expression_scanner_finds_metric_names() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, machine) (rate(a_bucket{job=~"x", m="by(y)"}'
        "[5m]))) / on (machine) group_left(state) b_total offset 5m or vector(0) > bool 1e3"
    )
    assert metric_names(expr) == {"a_bucket", "b_total"}
    assert metric_names("up") == {"up"}


def test_every_dashboard_query_names_a_metric_the_app_exports(tmp_path: Path) -> None:
    exported = asyncio.run(_run_everything(tmp_path))
    assert "statewright_transitions_total" in exported  # the collection itself works
    assert "statewright_worker_info" in exported
    used: set[str] = set()
    for where, expr in exprs(load()):
        names = metric_names(substituted(expr))
        assert names, f"{where}: no metric in {expr!r}"
        unknown = names - exported - PROMETHEUS_OWN
        assert not unknown, f"{where}: {sorted(unknown)} not exported (query {expr!r})"
        used |= names
    # Every family of the app is on the dashboard somewhere (a new metric gets a panel).
    families = {
        re.sub(r"_(total|bucket|sum|count|info)$", "", n)
        for n in exported
        if not n.endswith("_created")
    }
    shown = {re.sub(r"_(total|bucket|sum|count|info)$", "", n) for n in used}
    missing = sorted(families - shown - {"statewright_worker"})  # info: an instance's id
    assert not missing, f"exported but on no panel of {DASHBOARD.name}: add one: {missing}"
