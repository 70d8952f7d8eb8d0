"""Alert rules evaluated from the store: what an operator must look at now.

Every rule reads the store (so it sees every process's workflows) and gives at most one
:class:`Alert` per machine and state it concerns:

- ``running_too_long``: live workflows in a working state (one with a handler, or named in
  ``working_states``) for longer than ``running_too_long`` seconds;
- ``retry_flapping``: live workflows whose retry counter reached ``retry_attempts``, or that
  took their type's transient-error event (``on_transient``) ``retry_transitions`` times in
  the last ``retry_window`` seconds;
- ``paused_abandoned``: live workflows waiting for a person (a state with an approval event
  out of it, or named in ``paused_states``) for longer than ``paused_too_long``;
- ``blocked_too_long``: live workflows in a ``blocked_states`` state past ``blocked_too_long``;
- ``failure_ratio``: among a type's workflows that ended in the last ``failure_window``
  seconds (at least ``failure_min_ended`` of them), the share that ended in a
  ``failure_states`` state reached ``failure_ratio``;
- ``invalid_transition_spike``: at least ``rejection_spike`` refused events (illegal in the
  state, or an invalid payload) for one type in the last ``rejection_window`` seconds;
- ``workflow_parked`` (critical): at least ``parked_workflows`` workflows of one machine
  parked for an operator in one state, from the moment they park (a step whose outcome is
  unknown, a fatal error without an error edge, ...): nothing runs them until someone acts.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

from statewright.engine.core import Engine
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import InvalidInput, UnknownWorkflowType
from statewright.types import StuckCutoff, WorkflowFilter

Severity = Literal["warning", "critical"]
RULES = (
    "running_too_long",
    "retry_flapping",
    "paused_abandoned",
    "blocked_too_long",
    "failure_ratio",
    "invalid_transition_spike",
    "workflow_parked",
)
_SCAN_LIMIT = 1000
"""At most this many workflows are read for one retry-counter check (counts are then 1000+)."""


@dataclass(frozen=True)
class AlertThresholds:
    """When each rule fires. Durations and windows are in seconds."""

    running_too_long: float = 3600.0
    working_states: frozenset[str] = frozenset({"running"})
    """Working states besides those that have a handler."""
    retry_attempts: int = 3
    retry_transitions: int = 3
    retry_window: float = 900.0
    paused_too_long: float = 12 * 3600.0
    paused_states: frozenset[str] = frozenset({"paused", "awaiting_approval"})
    """Waiting-for-a-person states besides those with an approval event out of them."""
    blocked_too_long: float = 4 * 3600.0
    blocked_states: frozenset[str] = frozenset({"blocked"})
    failure_ratio: float = 0.25
    failure_window: float = 3600.0
    failure_min_ended: int = 5
    failure_states: frozenset[str] = frozenset(
        {"failed", "cancelled", "canceled", "rejected", "expired", "aborted", "error"}
    )
    """Terminal states that count as failures."""
    rejection_spike: int = 20
    rejection_window: float = 300.0
    parked_workflows: int = 1
    """Parked workflows of one machine in one state that fire ``workflow_parked``."""
    samples: int = 5
    """Workflow ids named per alert."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and value < 0:
                raise InvalidInput(f"alert threshold {f.name} must not be negative")
        if self.failure_ratio > 1:
            raise InvalidInput("alert threshold failure_ratio is a share: at most 1")
        if self.parked_workflows < 1:
            raise InvalidInput("alert threshold parked_workflows must be at least 1")

    def with_overrides(self, overrides: Mapping[str, str]) -> AlertThresholds:
        """A copy with some fields given as text (``{"running_too_long": "7200"}``; a set of
        states as comma-separated names)."""
        hints = get_type_hints(AlertThresholds)
        changes: dict[str, Any] = {}
        for name, text in overrides.items():
            if name not in hints:
                known = ", ".join(f.name for f in dataclasses.fields(self))
                raise InvalidInput(f"unknown alert threshold {name!r}; known: {known}")
            kind = hints[name]
            try:
                if kind is int:
                    changes[name] = int(text)
                elif kind is float:
                    changes[name] = float(text)
                else:
                    changes[name] = frozenset(s.strip() for s in text.split(",") if s.strip())
            except ValueError:
                raise InvalidInput(f"alert threshold {name}: {text!r} is not a number") from None
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Alert:
    """One firing rule for one machine (and state)."""

    rule: str
    severity: Severity
    message: str
    type: str
    state: str | None
    """The state concerned; None when the rule looks at the whole type."""
    count: int
    """Workflows (or refused events, for ``invalid_transition_spike``) concerned."""
    sample_ids: tuple[str, ...]
    value: float
    """What was measured: the oldest age in seconds, the failure share, the count."""
    threshold: float


def _ago(seconds: float) -> str:
    """``45s``, ``15m``, ``4h``, ``4h1m``, ``1d2h``: the two largest units."""
    s = int(seconds)
    for big, big_unit, small, small_unit in (
        (86400, "d", 3600, "h"),
        (3600, "h", 60, "m"),
        (60, "m", 1, "s"),
    ):
        if s >= big:
            rest = (s % big) // small
            return f"{s // big}{big_unit}" + (f"{rest}{small_unit}" if rest else "")
    return f"{s}s"


class _Rules:
    """One evaluation: the engine, thresholds, tenant and clock reading it runs with."""

    def __init__(self, engine: Engine, th: AlertThresholds, tenant: str | None, now: float):
        self.engine, self.th, self.tenant, self.now = engine, th, tenant, now
        self.store = engine.store

    def wtype(self, name: str) -> WorkflowType | None:
        try:
            return self.engine.type_of(name)
        except UnknownWorkflowType:
            return None  # rows of a type this process does not register: judged by name

    def category(self, type_name: str, state: str) -> str | None:
        wtype = self.wtype(type_name)
        machine = wtype.machine if wtype else None
        declared = machine.states.get(state) if machine else None
        if declared is not None and declared.terminal:
            return None
        th = self.th
        if state in th.paused_states or (
            machine is not None
            and any(machine.events[e].approval for e in machine.events_from(state))
        ):
            return "paused"
        if state in th.blocked_states:
            return "blocked"
        if state in th.working_states or (wtype is not None and state in wtype.handlers):
            return "working"
        return None

    async def aged(self, rule: str, category: str, limit: float, what: str) -> list[Alert]:
        """Live workflows of ``category`` states that entered them before ``now - limit``."""
        before = self.now - limit
        # The live (type, state) groups from the kept counts (no row read), then true counts of
        # the old ones in this category's groups only: one range of an index each.
        live = await self.store.count_by_state(terminal=False)
        cutoffs = [
            StuckCutoff(type_name, state, before)
            for type_name, state, _ in live
            if self.category(type_name, state) == category
        ]
        if not cutoffs:
            return []
        alerts = []
        for type_name, state, n, entered in await self.store.count_stuck(cutoffs, self.tenant):
            rows = await self.store.list_workflows(
                WorkflowFilter(
                    type=type_name,
                    state=state,
                    terminal=False,
                    tenant=self.tenant,
                    entered_before=before,
                    limit=max(1, self.th.samples),
                )
            )
            oldest = self.now - entered
            alerts.append(
                Alert(
                    rule=rule,
                    severity="warning",
                    message=f"{n} {type_name} workflow(s) {what} in {state!r} for more than "
                    f"{_ago(limit)} (oldest {_ago(oldest)})",
                    type=type_name,
                    state=state,
                    count=n,
                    sample_ids=tuple(r.id for r in rows[: self.th.samples]),
                    value=oldest,
                    threshold=limit,
                )
            )
        return alerts

    async def retry_flapping(self) -> list[Alert]:
        th = self.th
        flapping: dict[str, dict[str, int]] = defaultdict(dict)  # type -> id -> measure
        rows = await self.store.list_workflows(
            WorkflowFilter(
                terminal=False,
                min_attempts=th.retry_attempts,
                tenant=self.tenant,
                limit=_SCAN_LIMIT,
            )
        )
        for r in rows:
            flapping[r.type][r.id] = r.attempts
        error_events = {t.name: t.on_transient for t in self.engine.types if t.on_transient}
        if error_events:
            counts = await self.store.live_event_counts(
                self.now - th.retry_window, sorted(set(error_events.values())), self.tenant
            )
            for wid, type_name, event, n in counts:
                if error_events.get(type_name) == event and n >= th.retry_transitions:
                    seen = flapping[type_name]
                    seen[wid] = max(seen.get(wid, 0), n)
        alerts = []
        for type_name, ids in sorted(flapping.items()):
            worst = sorted(ids, key=lambda i: (-ids[i], i))
            count = len(ids)
            alerts.append(
                Alert(
                    rule="retry_flapping",
                    severity="warning",
                    message=f"{count}{'+' if count >= _SCAN_LIMIT else ''} live {type_name} "
                    f"workflow(s) keep failing: retry counter at {th.retry_attempts}+ or "
                    f"{th.retry_transitions}+ transient errors in the last "
                    f"{_ago(th.retry_window)}",
                    type=type_name,
                    state=None,
                    count=count,
                    sample_ids=tuple(worst[: th.samples]),
                    value=float(ids[worst[0]]),
                    threshold=float(th.retry_attempts),
                )
            )
        return alerts

    async def failure_ratio(self) -> list[Alert]:
        th = self.th
        since = self.now - th.failure_window
        ended = await self.store.count_by_state(
            terminal=True, tenant=self.tenant, entered_after=since
        )
        totals: dict[str, int] = defaultdict(int)
        failed: dict[str, dict[str, int]] = defaultdict(dict)
        for type_name, state, n in ended:
            totals[type_name] += n
            if state in th.failure_states:
                failed[type_name][state] = n
        alerts = []
        for type_name, total in sorted(totals.items()):
            bad = sum(failed[type_name].values())
            ratio = bad / total
            if total < th.failure_min_ended or bad == 0 or ratio < th.failure_ratio:
                continue
            samples: list[str] = []
            for state in sorted(failed[type_name]):
                rows = await self.store.list_workflows(
                    WorkflowFilter(
                        type=type_name,
                        state=state,
                        terminal=True,
                        tenant=self.tenant,
                        entered_after=since,
                        limit=max(1, th.samples),
                    )
                )
                samples += [r.id for r in rows]
            states = ", ".join(f"{s} {n}" for s, n in sorted(failed[type_name].items()))
            alerts.append(
                Alert(
                    rule="failure_ratio",
                    severity="critical",
                    message=f"{bad} of {total} {type_name} workflow(s) that ended in the last "
                    f"{_ago(th.failure_window)} failed ({ratio:.0%}: {states})",
                    type=type_name,
                    state=None,
                    count=bad,
                    sample_ids=tuple(samples[: th.samples]),
                    value=ratio,
                    threshold=th.failure_ratio,
                )
            )
        return alerts

    async def invalid_transition_spike(self) -> list[Alert]:
        th = self.th
        since = self.now - th.rejection_window
        by_type: dict[str, dict[str, int]] = defaultdict(dict)
        for type_name, code, n in await self.store.count_rejections(since, self.tenant):
            by_type[type_name][code] = n
        spiking = {
            t: codes for t, codes in by_type.items() if sum(codes.values()) >= th.rejection_spike
        }
        if not spiking:
            return []
        recent = await self.store.rejections(since, self.tenant, limit=200)
        alerts = []
        for type_name, codes in sorted(spiking.items()):
            total = sum(codes.values())
            ids = list(dict.fromkeys(r.workflow_id for r in recent if r.type == type_name))
            detail = ", ".join(f"{c} {n}" for c, n in sorted(codes.items()))
            alerts.append(
                Alert(
                    rule="invalid_transition_spike",
                    severity="warning",
                    message=f"{total} refused events on {type_name} workflows in the last "
                    f"{_ago(th.rejection_window)} ({detail})",
                    type=type_name,
                    state=None,
                    count=total,
                    sample_ids=tuple(ids[: th.samples]),
                    value=float(total),
                    threshold=float(th.rejection_spike),
                )
            )
        return alerts

    async def workflow_parked(self) -> list[Alert]:
        th = self.th
        groups: dict[tuple[str, str], dict[str, tuple[int, float]]] = defaultdict(dict)
        for p in await self.engine.parked_totals(self.now, self.tenant):
            groups[(p.type, p.state)][p.reason] = (p.count, p.oldest_age)
        alerts = []
        for (type_name, state), reasons in sorted(groups.items()):
            count = sum(n for n, _ in reasons.values())
            if count < th.parked_workflows:
                continue
            rows = await self.store.list_workflows(
                WorkflowFilter(
                    type=type_name,
                    state=state,
                    parked=True,
                    tenant=self.tenant,
                    limit=max(1, th.samples),
                )
            )
            oldest = max(age for _, age in reasons.values())
            detail = ", ".join(f"{why} {n}" for why, (n, _) in sorted(reasons.items()))
            todo = (
                "resolve the step whose outcome is unknown"
                if "step_outcome_unknown" in reasons
                else "fix the cause, then resume"
            )
            alerts.append(
                Alert(
                    rule="workflow_parked",
                    severity="critical",
                    message=f"{count} {type_name} workflow(s) parked in {state!r}, waiting for "
                    f"an operator ({detail}; oldest {_ago(oldest)}): {todo} "
                    "(`statewright stuck` lists them with what to do)",
                    type=type_name,
                    state=state,
                    count=count,
                    sample_ids=tuple(r.id for r in rows[: th.samples]),
                    value=float(count),
                    threshold=float(th.parked_workflows),
                )
            )
        return alerts


async def evaluate_alerts(
    engine: Engine,
    thresholds: AlertThresholds | None = None,
    *,
    tenant: str | None = None,
    now: float | None = None,
    rules: Iterable[str] = RULES,
) -> list[Alert]:
    """Every firing alert (of one tenant's workflows when given), critical ones first.

    Raises:
        StoreError: the store could not be read.
    """
    th = thresholds or AlertThresholds()
    wanted = set(rules)
    unknown = wanted - set(RULES)
    if unknown:
        raise InvalidInput(f"unknown alert rule(s): {', '.join(sorted(unknown))}")
    r = _Rules(engine, th, tenant, engine.clock.now() if now is None else now)
    found: list[Alert] = []
    if "running_too_long" in wanted:
        found += await r.aged("running_too_long", "working", th.running_too_long, "working")
    if "retry_flapping" in wanted:
        found += await r.retry_flapping()
    if "paused_abandoned" in wanted:
        found += await r.aged(
            "paused_abandoned", "paused", th.paused_too_long, "waiting for a person"
        )
    if "blocked_too_long" in wanted:
        found += await r.aged("blocked_too_long", "blocked", th.blocked_too_long, "blocked")
    if "failure_ratio" in wanted:
        found += await r.failure_ratio()
    if "invalid_transition_spike" in wanted:
        found += await r.invalid_transition_spike()
    if "workflow_parked" in wanted:
        found += await r.workflow_parked()
    order = {rule: i for i, rule in enumerate(RULES)}
    return sorted(
        found,
        key=lambda a: (a.severity != "critical", order[a.rule], a.type, a.state or ""),
    )


__all__ = ["RULES", "Alert", "AlertThresholds", "Severity", "evaluate_alerts"]
