"""A Prometheus rules file equivalent to the alert rules of
:mod:`statewright.observability.alerts`, over the metrics statewright exports
(``statewright alerts --prometheus-rules FILE``).

Which states each rule looks at comes from the machines the engine registers (the states
with a handler are working states, those with an approval event out of them wait for a
person, ...), exactly as the rules in Python judge them, plus the threshold sets' names for
machines this engine does not register. How each rule maps:

- running_too_long, paused_abandoned, blocked_too_long: the oldest live workflow's age per
  machine and state (``statewright_workflow_oldest_age_seconds``, read from the store at scrape
  time) past the threshold: the same test.
- failure_ratio: among the transitions into a terminal state within the window
  (``statewright_transitions_total``), the share into a failure state, with at least
  ``failure_min_ended`` of them: the same test, counted from transitions instead of rows.
- invalid_transition_spike: refused events within the window
  (``statewright_rejected_transitions_total`` without ``version_conflict``, which the
  rejections log does not record either): the same test.
- workflow_parked: the workflows parked for an operator per machine and state
  (``statewright_workflows_parked``, read from the store at scrape time, summed over the
  reasons) at the threshold: the same test.
- retry_flapping: NOT exactly expressible. The Python rule looks at each workflow (a retry
  counter at ``retry_attempts``, or ``retry_transitions`` transient errors within the window);
  metrics carry no workflow label (one series per workflow would grow without bound). The rule
  here counts retries per machine within the window (``statewright_retries_total``): it fires
  whenever the Python rule does, and also when several workflows of a machine each retried
  fewer times.

A second group, ``statewright_records``, has recording rules (no alerts) over the failures
counter (``statewright_failures_total``), so "which step fails most" is one query over a cheap
series: ``topk(5, statewright:step_failures:rate5m)``.

Counters are summed over every process that exports them (``serve``, workers); the
store-read gauges, the same in every process, are taken once (``max``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

from statewright.engine.core import Engine
from statewright.observability.alerts import AlertThresholds, _Rules

GROUP = "statewright"
AGE = "statewright_workflow_oldest_age_seconds"
TRANSITIONS = "statewright_transitions_total"
RETRIES = "statewright_retries_total"
REJECTED = "statewright_rejected_transitions_total"
PARKED = "statewright_workflows_parked"
FAILURES = "statewright_failures_total"
RECORDS = "statewright_records"
RECORDING = (
    (
        "statewright:failures:rate5m",
        f"sum by (machine, state, step, kind, error) (rate({FAILURES}[5m]))",
    ),
    (
        "statewright:step_failures:rate5m",
        f'sum by (machine, step) (rate({FAILURES}{{kind="step"}}[5m]))',
    ),
)
"""The recording rules: failures per second by every label of the counter (summed over the
processes), and failed step attempts per second by machine and step."""


def _regex(names: Iterable[str]) -> str:
    """A PromQL string literal matching exactly these names (RE2, anchored by PromQL)."""
    body = "|".join(re.escape(n) for n in sorted(set(names)))
    return '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _window(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _ago(seconds: float) -> str:
    from statewright.observability.alerts import _ago as ago

    return ago(seconds)


class _Builder:
    def __init__(self, engine: Engine, th: AlertThresholds) -> None:
        self.th = th
        self.rules = _Rules(engine, th, None, 0.0)
        self.machines = {t.name: t.machine for t in engine.types}

    def states(self, category: str) -> dict[str, list[str]]:
        """Per registered machine, its states of a category (as the Python rules judge)."""
        found: dict[str, list[str]] = {}
        for name, machine in sorted(self.machines.items()):
            names = [s for s in machine.states if self.rules.category(name, s) == category]
            if names:
                found[name] = sorted(names)
        return found

    def generic(self, category: str) -> set[str]:
        th = self.th
        return set(
            {
                "working": th.working_states,
                "paused": th.paused_states,
                "blocked": th.blocked_states,
            }[category]
        )

    def age_selectors(self, category: str) -> list[str]:
        sels = [
            f"{AGE}{{machine={_quote(m)},state=~{_regex(states)}}}"
            for m, states in self.states(category).items()
        ]
        generic = self.generic(category)
        if generic:
            others = f",machine!~{_regex(self.machines)}" if self.machines else ""
            sels.append(f"{AGE}{{state=~{_regex(generic)}{others}}}")
        return sels

    def terminal(self, failures_only: bool) -> list[str]:
        out = []
        for name, machine in sorted(self.machines.items()):
            names = [
                s.name
                for s in machine.states.values()
                if s.terminal and (not failures_only or s.name in self.th.failure_states)
            ]
            if names:
                out.append(f"{TRANSITIONS}{{machine={_quote(name)},to_state=~{_regex(names)}}}")
        return out


def _increase(selectors: list[str], window: str) -> str:
    parts = [f"increase({s}[{window}])" for s in selectors]
    return "sum by (machine) (" + " or ".join(parts) + ")"


def prometheus_rules(engine: Engine, thresholds: AlertThresholds | None = None) -> dict[str, Any]:
    """The rules file's document (``groups: [...]``) for the engine's registered machines."""
    th = thresholds or AlertThresholds()
    b = _Builder(engine, th)
    rules: list[dict[str, Any]] = []

    def add(name: str, severity: str, expr: str, summary: str, description: str) -> None:
        rules.append(
            {
                "alert": name,
                "expr": expr,
                "labels": {"severity": severity},
                "annotations": {"summary": summary, "description": description},
            }
        )

    for rule, category, limit, what in (
        ("running_too_long", "working", th.running_too_long, "working"),
        ("paused_abandoned", "paused", th.paused_too_long, "waiting for a person"),
        ("blocked_too_long", "blocked", th.blocked_too_long, "blocked"),
    ):
        sels = b.age_selectors(category)
        if not sels:
            continue
        add(
            rule,
            "warning",
            f"max by (machine, state) ({' or '.join(sels)}) > {limit:g}",
            f"{{{{ $labels.machine }}}} workflow(s) {what} in {{{{ $labels.state }}}} for "
            f"more than {_ago(limit)}",
            f"The oldest live one has been in its state longer than {_ago(limit)}.",
        )

    retry_window = _window(th.retry_window)
    add(
        "retry_flapping",
        "warning",
        f"sum by (machine) (increase({RETRIES}[{retry_window}])) >= {th.retry_transitions:g}",
        f"{{{{ $labels.machine }}}} workflows keep failing: {th.retry_transitions}+ retries in "
        f"the last {_ago(th.retry_window)}",
        "Counted per machine, not per workflow (metrics have no workflow label): it also "
        "fires when several workflows each retried less; `statewright alerts` tells which.",
    )

    ended, failed = b.terminal(False), b.terminal(True)
    if ended and failed:
        window = _window(th.failure_window)
        total = _increase(ended, window)
        add(
            "failure_ratio",
            "critical",
            f"({_increase(failed, window)} / {total} >= {th.failure_ratio:g})"
            f" and on (machine) ({total} >= {th.failure_min_ended:g})",
            f"{{{{ $labels.machine }}}}: many workflows that ended in the last "
            f"{_ago(th.failure_window)} failed",
            f"At least {th.failure_ratio:.0%} of them ended in a failure state "
            f"({', '.join(sorted(th.failure_states))}).",
        )

    add(
        "invalid_transition_spike",
        "warning",
        f'sum by (machine) (increase({REJECTED}{{code!="version_conflict"}}'
        f"[{_window(th.rejection_window)}])) >= {th.rejection_spike:g}",
        f"refused events on {{{{ $labels.machine }}}} workflows in the last "
        f"{_ago(th.rejection_window)}",
        f"{th.rejection_spike}+ refused events (illegal in the state, or an invalid payload).",
    )

    add(
        "workflow_parked",
        "critical",
        f"max by (machine, state) (sum without (reason) ({PARKED})) >= {th.parked_workflows:g}",
        "{{ $labels.machine }} workflow(s) parked in {{ $labels.state }}, waiting for an operator",
        "Nothing runs them until someone acts: `statewright stuck` lists them with what to do "
        "(resolve a step whose outcome is unknown, or fix the cause and resume).",
    )
    recording = [{"record": name, "expr": expr} for name, expr in RECORDING]
    return {"groups": [{"name": GROUP, "rules": rules}, {"name": RECORDS, "rules": recording}]}


HEADER = """\
# Prometheus alerting rules equivalent to statewright's alert rules
# (generated by `statewright alerts --prometheus-rules`; regenerate when machines change).
# Check: promtool check rules FILE
# retry_flapping is an approximation: metrics have no workflow label, so retries are counted
# per machine (it fires whenever `statewright alerts` does, and also when several workflows
# each retried less). The others test what `statewright alerts` tests.
# The group statewright_records records failure rates (which step fails most:
# topk(5, statewright:step_failures:rate5m)).
"""


def rules_yaml(engine: Engine, thresholds: AlertThresholds | None = None) -> str:
    """The rules file's text."""
    doc = prometheus_rules(engine, thresholds)
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


__all__ = ["prometheus_rules", "rules_yaml"]
