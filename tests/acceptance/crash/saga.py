"""The compensation crash test's app and worker: a saga whose steps call the crash service
(:class:`~tests.acceptance.crash.app.Service`, in ``count`` mode: it deduplicates nothing) and
declare their undos, which call it too; the worker process that runs it.

Shared by the test process (which starts the workflows, cancels some and checks the outcome)
and the worker processes forked by :class:`SagaZygote` (which run them and get killed).

A workflow's ``kind`` (in its context) decides its course in ``booking``, whose handler runs
the steps of :data:`STEPS` in order, each ``compensate=undo``:

- ``abort2`` / ``abort3``: two or three steps, then ``abort``, a compensating transition;
- ``hold``: three steps, then ``hold`` into ``held`` (no handler), where the test cancels it
  (the type compensates on cancel: the cancel is handed to a worker);
- ``fatal``: two steps, then a third whose action raises FatalError before any call (the type
  compensates on a fatal failure; the failed step is reconciled as not applied: no undo);
- ``midcancel``: three steps then ``hold``; the test cancels it at a random moment, while its
  handler runs or after.

Every step and every undo has a type-level reconcile hook (the service's lookup). Kill points
are :class:`~tests.acceptance.crash.app.Faults`', with details: the step's name for steps, and
``undo`` in an undo (``before_effect/undo`` after its *executing* record, ``during_step/undo``
after the service applied it).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statewright import MachineBuilder, Next, Run, WorkflowType
from statewright.engine.ledger import StepKey
from statewright.errors import FatalError
from tests.acceptance.crash.app import Faults, Service, amount_of
from tests.acceptance.crash.worker import parser
from tests.acceptance.crash.worker import run as run_worker
from tests.acceptance.crash.zygote import PRELOAD, Zygote
from tests.forkserver import ForkServer

TYPE = "saga_order"
STEPS = ("reserve", "charge", "ship")
KINDS = ("abort2", "abort3", "hold", "fatal", "midcancel")
FINAL = {
    "abort2": "aborted",
    "abort3": "aborted",
    "hold": "cancelled",
    "fatal": "failed",
    "midcancel": "cancelled",
}
DONE = {"abort2": 2, "abort3": 3, "hold": 3, "fatal": 2}
"""How many steps complete (and are undone), by kind; ``midcancel``: any number."""


def machine() -> Any:
    b = MachineBuilder(TYPE)
    b.state("booking", initial=True).state("held")
    for final in ("aborted", "cancelled", "failed"):
        b.state(final, terminal=True)
    b.event("abort").event("hold").event("cancel").event("fatal_error")
    b.transition("abort", "booking", "aborted", compensate=True)
    b.transition("hold", "booking", "held")
    b.transition("cancel", ["booking", "held"], "cancelled")
    b.transition("fatal_error", "booking", "failed")
    return b.build()


def saga_type(service: Service, faults: Faults | None = None) -> WorkflowType:
    faults = faults or Faults()

    async def call(key: StepKey, what: dict[str, Any], detail: str) -> dict[str, Any]:
        faults.hit("before_effect", key.workflow_id, detail)
        await faults.jitter()
        with faults.calling():
            await faults.around_call()
            effect = service.apply(key, what, token=key.fencing_token)
            await faults.around_call()
        faults.hit("during_step", key.workflow_id, detail)
        await faults.jitter()
        return effect

    async def undo(key: StepKey, result: Any) -> dict[str, Any]:
        return await call(key, {"undoes": result["effect_id"]}, "undo")

    async def booking(run: Run) -> Next:
        kind = run.context["kind"]
        steps = STEPS[: DONE.get(kind, 3)]
        for step in steps:
            faults.hit("before_step", run.id, step)
            await faults.jitter()

            async def action(key: StepKey, step: str = step) -> dict[str, Any]:
                return await call(key, {"step": step, "amount": amount_of(key)}, step)

            await run.step(step, action, compensate=undo)
            faults.hit("after_step", run.id, step)
        if kind == "fatal":
            await run.step(STEPS[2], _declined, compensate=undo)
        return Next("abort" if kind.startswith("abort") else "hold")

    hooks = {name: service.lookup for step in STEPS for name in (step, f"undo.{step}")}
    return WorkflowType(
        machine(),
        handlers={"booking": booking},
        reconcilers=hooks,
        compensations={"saga.undo": undo},
        compensate_on=("cancel", "fatal"),
        on_transient=None,
    )


def _declined(key: StepKey) -> None:
    raise FatalError("card declined")


async def run(args: argparse.Namespace) -> int:
    """:func:`tests.acceptance.crash.worker.run`, with the saga's type."""
    return await run_worker(args, lambda service, faults, a: [saga_type(service, faults)])


def child_main(argv: Sequence[str]) -> int:
    return asyncio.run(run(parser().parse_args(list(argv))))


def prepare() -> None:
    parser().parse_args(["--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"])


class SagaZygote(Zygote):
    """The crash tests' zygote (:mod:`tests.acceptance.crash.zygote`) forking saga workers."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        ForkServer.__init__(
            self,
            log,
            "tests.acceptance.crash.saga:child_main",
            preload=PRELOAD,
            prepare="tests.acceptance.crash.saga:prepare",
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            name="saga zygote",
            timeout=timeout,
        )
