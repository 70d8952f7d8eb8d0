"""Prometheus metrics of one engine, in a registry of their own (never the global default
registry, so several engines or apps in one process do not collide).

Counters and histograms are fed by the engine's observers as things happen in this process;
the per-state workflow gauge is read from the store at scrape time (:meth:`EngineMetrics.render`),
so it covers every process sharing the store.

Label values are bounded by what the code declares, never by what callers send: a machine label
is the name of a type registered with the engine, a state or event label one that machine
declares (or the engine's own ``$start``), and anything else (a refused event name nobody
declared, a type this process does not know) counts under the one value :data:`UNKNOWN`. So
hostile input cannot grow the exposition (each new label set is a series a scraper keeps).
Step names come from handler code, not from the machine: each is shaped first (visit and call
numbers dropped, :func:`step_shape`), then the first :data:`MAX_STEP_NAMES` shapes of
each machine are kept, later ones count as :data:`UNKNOWN` (the step histogram and the
failures counter share that list; a handler failure that ran no step has an empty step label).
The workflow gauge's labels come from stored rows, which only an engine that has the type
registered writes; the parked gauge's reason label is one of the reasons the runtime parks for
(anything else: :data:`UNKNOWN`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from statewright import offload
from statewright.definition.machine import Machine
from statewright.engine.core import Engine, ParkedTotal, StuckTotal
from statewright.engine.hooks import Failure, Rejection, RetryEvent, TransitionEvent
from statewright.engine.looplag import LagReport
from statewright.engine.parked import REASONS as PARKED_REASONS
from statewright.engine.records import ERRORS, KINDS
from statewright.errors import UnknownWorkflowType
from statewright.observability.llm_metrics import LlmMetrics
from statewright.observability.oldest import OldestAges
from statewright.store.protocol import ReadModel
from statewright.types import WorkflowRow

log = logging.getLogger(__name__)

RECOVERY_FROM = frozenset({"paused", "blocked", "retrying"})
"""States a workflow recovers from when it goes back to a :data:`RECOVERY_TO` state."""
RECOVERY_TO = frozenset({"running"})
DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)
"""Seconds: time in a state and time to recover span seconds to days."""
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
UNKNOWN = "_unknown"
"""The label value of every name the code does not declare (see the module docstring), and the
machine label of a refusal whose workflow the engine had not read (a refused cancel)."""
ENGINE_EVENTS = frozenset({"$start", "$patch_context"})
"""Event labels the engine itself uses, declared by no machine."""
MAX_STEP_NAMES = 100
"""Distinct step labels kept per machine."""


class _Names:
    """The label values the engine's registered types declare (read when a value is needed:
    types may be registered after the metrics are attached)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = weakref.ref(engine)  # the engine holds the metrics, not the reverse
        self._steps: defaultdict[str, set[str]] = defaultdict(set)

    def machine_of(self, type_name: str, version: int) -> Machine | None:
        """The machine of that version, else the type's latest; None for an unknown type."""
        engine = self._engine()
        if engine is None:
            return None
        for wanted in (version, None):
            try:
                return engine.type_of(type_name, wanted).machine
            except UnknownWorkflowType:
                pass
        return None

    def machine(self, row: WorkflowRow | None) -> str:
        if row is None or self.machine_of(row.type, row.machine_version) is None:
            return UNKNOWN
        return row.type

    def state(self, row: WorkflowRow, state: str | None = None) -> str:
        name = row.state if state is None else state
        machine = self.machine_of(row.type, row.machine_version)
        return name if machine is not None and name in machine.states else UNKNOWN

    def event(self, row: WorkflowRow | None, event: str) -> str:
        if event in ENGINE_EVENTS:
            return event
        machine = None if row is None else self.machine_of(row.type, row.machine_version)
        return event if machine is not None and event in machine.events else UNKNOWN

    def step(self, row: WorkflowRow, step: str) -> str:
        if self.machine_of(row.type, row.machine_version) is None:
            return UNKNOWN
        step = step_shape(step)
        seen = self._steps[row.type]
        if step not in seen:
            if len(seen) >= MAX_STEP_NAMES:
                return UNKNOWN
            seen.add(step)
        return step


_NUMBERED = re.compile(r"\.v?\d+(?:-\d+)*(?=\.|$)|_v\d+$|(?<=\.tool)\.[^.]+(?=\.[^.]+$)")


@functools.lru_cache(maxsize=4096)  # a regex per observed step otherwise; names repeat
def step_shape(step: str) -> str:
    """A step's name without the numbers that tell one visit or call from the next: the
    visit (``.v12``, ``_v12``) and ordinal (``.3``, ``.0-1``) parts of names like an agent's
    ``reviewer.v12.model.3`` or ``reviewer.v12.tool.0-1.read_order``, a wait's ``$wait.v4.0``
    or ``ask_approver_v5`` are dropped (``reviewer.model``, ``reviewer.tool.read_order``,
    ``$wait``, ``ask_approver``), and so is the model's call id in an agent's tool step
    (``agent.v3.tool.call_Xy7.lookup`` is ``agent.tool.lookup``), so a label names the kind of
    step, not each call of it."""
    return _NUMBERED.sub("", step) or step


class _WorkflowCounts(Collector):
    """``statewright_workflows`` and ``statewright_stuck_workflows`` from the last store read,
    and whether that read worked."""

    def __init__(self) -> None:
        self.counts: Sequence[tuple[str, str, int]] | None = None
        self.stuck: Sequence[StuckTotal] = ()
        self.parked: Sequence[ParkedTotal] = ()

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "statewright_workflows",
            "Workflows per machine and state (terminal states included), read from the store "
            "at scrape time.",
            labels=["machine", "state"],
        )
        for machine, state, n in self.counts or ():
            gauge.add_metric([machine, state], n)
        yield gauge
        stuck = GaugeMetricFamily(
            "statewright_stuck_workflows",
            "Workflows past their state's stuck threshold (statewright stuck) per machine and "
            "state, read from the store at scrape time.",
            labels=["machine", "state"],
        )
        oldest = GaugeMetricFamily(
            "statewright_stuck_oldest_seconds",
            "Age in its state of the oldest stuck workflow, per machine and state.",
            labels=["machine", "state"],
        )
        for g in self.stuck if self.counts is not None else ():
            stuck.add_metric([g.type, g.state], g.count)
            oldest.add_metric([g.type, g.state], g.oldest_age)
        yield stuck
        yield oldest
        yield self._parked()
        yield GaugeMetricFamily(
            "statewright_store_up",
            "1 when the store answered this scrape's count query, else 0.",
            value=0.0 if self.counts is None else 1.0,
        )

    def _parked(self) -> GaugeMetricFamily:
        gauge = GaugeMetricFamily(
            "statewright_workflows_parked",
            "Workflows parked for an operator (each is stuck too, whatever its age) per "
            "machine, state and reason (step_outcome_unknown, fatal_error, "
            "error_event_refused, cancel_refused), read from the store at scrape time.",
            labels=["machine", "state", "reason"],
        )
        found: dict[tuple[str, str, str], int] = {}
        for p in self.parked if self.counts is not None else ():
            reason = p.reason if p.reason in PARKED_REASONS else UNKNOWN
            key = (p.type, p.state, reason)
            found[key] = found.get(key, 0) + p.count
        for labels, n in sorted(found.items()):
            gauge.add_metric(list(labels), n)
        return gauge

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily("statewright_workflows", "", labels=["machine", "state"]),
            GaugeMetricFamily("statewright_stuck_workflows", "", labels=["machine", "state"]),
            GaugeMetricFamily("statewright_stuck_oldest_seconds", "", labels=["machine", "state"]),
            GaugeMetricFamily(
                "statewright_workflows_parked", "", labels=["machine", "state", "reason"]
            ),
            GaugeMetricFamily("statewright_store_up", ""),
        ]


class EngineMetrics:
    """The collectors of one engine, attached to its observers.

    Use :func:`attach_metrics` to get the one instance of an engine.

    Args:
        engine: whose observers feed the counters and whose store the gauge reads.
        registry: where the collectors go; a new registry by default.
        recovery_from / recovery_to: leaving one of ``recovery_from`` for one of
            ``recovery_to`` is a recovery (``statewright_recovery_seconds``).
        scrape_timeout: seconds the store gets to count workflows during a scrape.
    """

    def __init__(
        self,
        engine: Engine,
        registry: CollectorRegistry | None = None,
        *,
        recovery_from: Iterable[str] = RECOVERY_FROM,
        recovery_to: Iterable[str] = RECOVERY_TO,
        scrape_timeout: float = 5.0,
    ) -> None:
        # No reference to the engine itself: the engine holds this object through its
        # observers, and attach_metrics keys a weak mapping by the engine.
        self.store: ReadModel = engine.store
        self.names = _Names(engine)
        self._engine = weakref.ref(engine)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.recovery_from = frozenset(recovery_from)
        self.recovery_to = frozenset(recovery_to)
        self.scrape_timeout = scrape_timeout
        self._scrape = asyncio.Lock()
        r = self.registry
        self.transitions = Counter(
            "statewright_transitions",
            "Committed transitions by machine, event and target state (starts: event $start).",
            ["machine", "event", "to_state"],
            registry=r,
        )
        self.time_in_state = Histogram(
            "statewright_time_in_state_seconds",
            "Time workflows spent in a state, observed when they leave it.",
            ["machine", "state"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.retries = Counter(
            "statewright_retries",
            "Transient failures a retry was scheduled for: mode 'transition' moved the workflow "
            "to a waiting state (e.g. retrying), 'in_place' re-runs the state's handler later.",
            ["machine", "state", "mode"],
            registry=r,
        )
        self.recovery = Histogram(
            "statewright_recovery_seconds",
            "Time to recover: time spent in a paused, blocked or retrying state before going "
            "back to running (the mean is _sum / _count).",
            ["machine", "from_state"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.rejected = Counter(
            "statewright_rejected_transitions",
            "Refused transition attempts by machine, event and error code (illegal_transition, "
            "invalid_payload, version_conflict).",
            ["machine", "event", "code"],
            registry=r,
        )
        self.not_applied = Counter(
            "statewright_events_not_applied",
            "Events sent if_allowed that were not allowed in the workflow's state then (a late "
            "webhook, a duplicate callback): nothing changed; not counted as rejected.",
            ["machine", "event"],
            registry=r,
        )
        self.steps = Histogram(
            "statewright_step_duration_seconds",
            "Duration of the steps that completed, by machine and step name.",
            ["machine", "step"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.failures = Counter(
            "statewright_failures",
            "Handler and step failures by machine, state and step: kind 'step' for each failed "
            "attempt of a step's action, 'handler' for a state's failure (the handler raised, "
            "returned a refused event, ran past its deadline, its worker was lost; the step is "
            "the one it ran last, empty if none); error 'transient', 'fatal' (the retry "
            "policy's verdict) or 'unknown' (a step's outcome is unknown).",
            ["machine", "state", "step", "kind", "error"],
            registry=r,
        )
        self.loop_stalls = Histogram(
            "statewright_event_loop_stall_seconds",
            "How long user code (an async def handler or step that blocked) stalled a worker's "
            "event loop, per stall above the worker's loop_lag_threshold.",
            buckets=(1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0),
            registry=r,
        )
        self.llm = LlmMetrics(self.names, r)
        self._workflows = _WorkflowCounts()
        r.register(self._workflows)
        self.clock = engine.clock
        self._oldest = OldestAges()  # makes the alert rules' age checks expressible
        r.register(self._oldest)
        observers = engine.observers
        observers.transition.append(self.on_transition)
        observers.rejections.append(self.on_rejection)
        observers.not_applied.append(self.on_not_applied)
        observers.retry.append(self.on_retry)
        observers.step.append(self.on_step)
        observers.lag.append(self.on_lag)
        observers.failure.append(self.on_failure)
        observers.model_call.append(self.llm.on_model_call)

    # -- observers -----------------------------------------------------------------------------

    def on_transition(self, ev: TransitionEvent) -> None:
        after, before, n = ev.after, ev.before, self.names
        machine = n.machine(after)
        self.transitions.labels(machine, n.event(after, ev.event), n.state(after)).inc()
        if before is None or before.state == after.state:
            return  # a start, or a self-transition: no state was left
        spent = max(0.0, after.updated_at - before.state_entered_at)
        left = n.state(after, before.state)
        self.time_in_state.labels(machine, left).observe(spent)
        if before.state in self.recovery_from and after.state in self.recovery_to:
            self.recovery.labels(machine, left).observe(spent)

    def on_rejection(self, r: Rejection) -> None:
        n = self.names
        self.rejected.labels(
            n.machine(r.workflow), n.event(r.workflow, r.event), r.error.code
        ).inc()

    def on_not_applied(self, r: Rejection) -> None:
        n = self.names
        self.not_applied.labels(n.machine(r.workflow), n.event(r.workflow, r.event)).inc()

    def on_retry(self, ev: RetryEvent) -> None:
        mode = "in_place" if ev.in_place else "transition"
        failed = ev.failed
        self.retries.labels(self.names.machine(failed), self.names.state(failed), mode).inc()

    def on_step(self, workflow: WorkflowRow, step: str, seconds: float) -> None:
        n = self.names
        self.steps.labels(n.machine(workflow), n.step(workflow, step)).observe(seconds)

    def on_failure(self, f: Failure) -> None:
        n, row = self.names, f.workflow
        step = "" if f.step is None else n.step(row, f.step)
        kind = f.kind if f.kind in KINDS else UNKNOWN
        error = f.error if f.error in ERRORS else UNKNOWN
        self.failures.labels(n.machine(row), n.state(row), step, kind, error).inc()

    def on_lag(self, report: LagReport) -> None:
        self.loop_stalls.observe(report.seconds)

    # -- scrape --------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the workflow and stuck counts from the store (``statewright_store_up`` 0 if
        it fails)."""
        engine = self._engine()

        async def stuck_counts() -> list[StuckTotal]:
            return [] if engine is None else await engine.stuck_counts()

        async def parked_totals() -> list[ParkedTotal]:
            return [] if engine is None else await engine.parked_totals()

        async def oldest_ages() -> None:
            with contextlib.suppress(Exception):  # its gauge is left empty; store_up tells
                await self._oldest.refresh(self.store, self.clock)

        try:
            async with asyncio.timeout(self.scrape_timeout):
                # Concurrent: on PostgreSQL each read takes a pooled connection of its own, so
                # a scrape costs about its slowest read rather than their sum.
                counts, stuck, parked, _ = await asyncio.gather(
                    self.store.count_by_state(), stuck_counts(), parked_totals(), oldest_ages()
                )
        except Exception as exc:
            log.warning(
                "metrics: counting workflows failed",
                extra={"action": "metrics_store_failed", "error": f"{type(exc).__name__}: {exc}"},
            )
            self._workflows.counts = None
            return
        self._workflows.counts, self._workflows.stuck = counts, stuck
        self._workflows.parked = parked

    async def render(self) -> bytes:
        """The text exposition of every collector, with fresh workflow counts."""
        # One scrape at a time, so that concurrent ones cannot mix their counts; the text is
        # rendered off the event loop (with many machines and states it is long).
        async with self._scrape:
            await self.refresh()
            return await offload.run(generate_latest, self.registry)


_attached: weakref.WeakKeyDictionary[Engine, EngineMetrics] = weakref.WeakKeyDictionary()


def attach_metrics(engine: Engine, registry: CollectorRegistry | None = None) -> EngineMetrics:
    """The engine's metrics, created and attached to its observers on the first call.

    Later calls return the same instance (an engine's transitions are counted once however
    many apps serve it); passing another ``registry`` then is an error.
    """
    found = _attached.get(engine)
    if found is not None:
        if registry is not None and registry is not found.registry:
            raise ValueError("this engine's metrics are attached to another registry already")
        return found
    metrics = _attached[engine] = EngineMetrics(engine, registry)
    return metrics


__all__ = ["EngineMetrics", "attach_metrics"]
