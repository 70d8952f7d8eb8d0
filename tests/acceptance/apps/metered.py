"""A workflow type that feeds every metric family, for the Prometheus acceptance test and the
dashboard test (``--app`` this file).

``metered``: ``running`` (handler) -> ``done``. The handler runs two steps: ``flaky``, whose
first attempt fails transiently (a step failure, and the handler's, retried in place after a
short backoff), then ``measure``; so a run yields a start, a retry, two failures, step
durations and a finishing transition. Between the two, ``think`` is a model call recorded
as an agent's (a usage envelope, observed once: :mod:`statewright.agents.usage`) for the
``statewright_llm_*`` counters. ``hold`` from ``running``
parks the workflow in ``paused`` (stuck after 10 ms) until ``resume`` sends it back: leaving
``paused`` for ``running`` is a recovery (``statewright_recovery_seconds``). A workflow started
with ``{"fatal": true}`` fails fatally in ``running`` (no error edge): the worker parks it for
an operator (``statewright_workflows_parked``).
"""

from __future__ import annotations

from statewright import (
    FatalError,
    MachineBuilder,
    Next,
    RetryPolicy,
    Run,
    TransientError,
    WorkflowType,
)
from statewright.agents import usage
from statewright.engine.steps import StepKey

MODEL = usage.Usage("metered-model", input_tokens=100, output_tokens=20, cost=0.25)
"""What each workflow's one model call uses."""

MACHINE = (
    MachineBuilder("metered")
    .state("running", initial=True)
    .state("paused", stuck_after=0.01)
    .state("done", terminal=True)
    .event("finish")
    .event("hold")
    .event("resume")
    .transition("finish", "running", "done")
    .transition("hold", "running", "paused")
    .transition("resume", "paused", "running")
    .build()
)


def _flaky(key: StepKey) -> None:
    if key.attempt == 1:
        raise TransientError("the first attempt fails, to count a retry and failures")


def _measure(key: str) -> int:
    return len(key)


async def work(run: Run) -> Next:
    if run.context.get("fatal"):
        raise FatalError("asked to fail: parked for an operator")
    await run.step("flaky", _flaky, safe_to_repeat=True)
    visit = run.workflow.version

    def think(key: StepKey) -> dict[str, object]:
        usage.observe(run, MODEL)
        said = [{"role": "assistant", "content": "measure it"}]
        return usage.envelope(
            MODEL, agent="metered", state=run.state, visit=visit, response=None, messages=said
        )

    await run.step(f"metered.v{visit}.model.0", think)
    measured = await run.step("measure", _measure)
    return Next("finish", context={"measured": measured})


TYPES = [
    WorkflowType(
        MACHINE,
        {"running": work},
        retry=RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=0.1, jitter=0.0),
        on_transient=None,  # no retry edges: the handler re-runs in place
    )
]
