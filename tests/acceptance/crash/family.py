"""The child-workflow crash tests' app and worker: a parent that fans out over children, a
child whose one step calls the crash service, and the worker process that runs them.

Shared by the test process (which starts parents, cancels them and checks the outcome) and the
worker processes forked by :class:`FamilyZygote` (which run them and get killed).

- **Parent** (:data:`PARENT`): waits in ``fanning``, whose handler is the library's
  :func:`~statewright.engine.children.fan_out` over ``context["parcels"]`` with a cap; every
  ``child_done``/``child_failed`` is a self-transition with :func:`gather` until
  :func:`all_done` takes it to ``done``. ``cancel`` takes it to ``called_off`` (a name of its
  own, so that a kill plan can aim at the parent's cancel: ``after_transition/called_off``).
- **Child** (:data:`CHILD`): ``shipping`` runs one step, ``ship``, calling the service (a
  reconcile hook, no deduplication in ``count`` mode), then ``ship`` to ``shipped``. Its result
  for the parent is its item and the service's effect id. An input ``hold`` makes its handler
  wait that long first (checking for a cancel), ``wait`` sends it to ``waiting``, a state
  without a handler it leaves only by a cancel: the cancel tests' children.

Kill points are those of :class:`~tests.acceptance.crash.app.Faults`, with details naming where
they are: in the child ``before_step``/``before_effect``/``during_step``/``after_step`` of the
step ``ship``; in the parent's handler ``before_step/fan_out`` and ``after_step/fan_out``, and
``during_step/start_child`` after each child it created (the child exists, the parent's run has
not finished); ``after_transition/<state>`` after any transition (``shipped``: a child's end,
armed on its parent in the same transaction; ``fanning``/``done``: the parent heard a child).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from statewright import Engine, MachineBuilder, Next, Run, WorkflowType, store_from_url
from statewright.engine.children import all_done, fan_out, gather
from statewright.errors import VersionConflict
from tests.acceptance.crash.app import Faults, Service, amount_of
from tests.acceptance.crash.worker import parser as crash_parser
from tests.acceptance.crash.worker import run as run_worker
from tests.acceptance.crash.zygote import PRELOAD, Zygote
from tests.forkserver import ForkServer

PARENT = "family_order"
CHILD = "family_parcel"
OVER = "parcels"
STEP = "ship"
CAP = 5
CANCELLED = "called_off"
"""The parent's state after ``cancel`` (the child's is ``cancelled``)."""


def parent_machine() -> Any:
    b = MachineBuilder(PARENT)
    b.state("fanning", initial=True).state("done", terminal=True)
    b.state(CANCELLED, terminal=True)
    b.event("child_done").event("child_failed").event("cancel")
    for ev in ("child_done", "child_failed"):
        b.transition(ev, "fanning", "done", guard=all_done(OVER), assign=gather())
        b.transition(ev, "fanning", "fanning", assign=gather())
    b.transition("cancel", "fanning", CANCELLED)
    return b.build()


def child_machine() -> Any:
    b = MachineBuilder(CHILD)
    b.state("shipping", initial=True).state("waiting")
    b.state("shipped", terminal=True).state("cancelled", terminal=True)
    b.event(STEP).event("wait").event("go").event("cancel")
    b.transition(STEP, "shipping", "shipped").transition("wait", "shipping", "waiting")
    b.transition("go", "waiting", "shipped")
    b.transition("cancel", ["shipping", "waiting"], "cancelled")
    return b.build()


class _Starting:
    """What :func:`fan_out`'s handler sees of the run: its context, and ``start_child`` with a
    kill point after each child it created."""

    def __init__(self, run: Run, faults: Faults) -> None:
        self._run = run
        self._faults = faults

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def context(self) -> Mapping[str, Any]:
        return self._run.context

    async def start_child(
        self, workflow_type: str, key: str, input: Mapping[str, Any] | None = None
    ) -> Any:
        started = await self._run.start_child(workflow_type, key, input)
        if started.created:
            self._faults.hit("during_step", self._run.id, "start_child")
        return started


def child_input(item: Any) -> dict[str, Any]:
    """A child's context: the item, plus ``hold``/``wait`` when the parcel is a mapping."""
    if isinstance(item, Mapping):
        return dict(item)
    return {"item": item}


def parent_type(faults: Faults | None = None, cap: int = CAP) -> WorkflowType:
    faults = faults or Faults()
    inner = fan_out(CHILD, OVER, cap=cap, input=child_input)

    async def fanning(run: Run) -> None:
        faults.hit("before_step", run.id, "fan_out")
        await faults.jitter()
        await inner(_Starting(run, faults))
        faults.hit("after_step", run.id, "fan_out")
        await faults.jitter()
        return None

    return WorkflowType(parent_machine(), handlers={"fanning": fanning})


def child_result(context: Mapping[str, Any]) -> dict[str, Any]:
    effect = context.get(STEP) or {}
    return {"item": context.get("item"), "effect_id": effect.get("effect_id")}


def child_type(service: Service, faults: Faults | None = None) -> WorkflowType:
    faults = faults or Faults()

    async def shipping(run: Run) -> Next:
        hold = float(run.context.get("hold") or 0)
        until = time.monotonic() + hold
        while time.monotonic() < until:  # a slow child: a cancel request reaches it here
            await run.check_cancel()
            await asyncio.sleep(min(0.05, max(0.0, until - time.monotonic())))
        faults.hit("before_step", run.id, STEP)
        await faults.jitter()

        async def action(key: Any) -> dict[str, Any]:  # a StepKey: str + fencing_token
            faults.hit("before_effect", run.id, STEP)
            await faults.jitter()
            with faults.calling():
                await faults.around_call()
                effect = service.apply(
                    key, {"step": STEP, "amount": amount_of(key)}, token=key.fencing_token
                )
                await faults.around_call()
            faults.hit("during_step", run.id, STEP)
            await faults.jitter()
            return effect

        result = await run.step(STEP, action, reconcile=service.lookup)
        faults.hit("after_step", run.id, STEP)
        await faults.jitter()
        event = "wait" if run.context.get("wait") else STEP
        return Next(event, {"effect_id": result["effect_id"]}, context={STEP: result})

    return WorkflowType(child_machine(), handlers={"shipping": shipping}, result=child_result)


def make_types(
    service: Service, faults: Faults | None = None, cap: int = CAP
) -> list[WorkflowType]:
    faults = faults or Faults()
    return [parent_type(faults, cap), child_type(service, faults)]


# -- the worker process ----------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    """:func:`tests.acceptance.crash.worker.run`, with the family's types."""
    return await run_worker(args, lambda service, faults, a: make_types(service, faults, a.cap))


def parser() -> argparse.ArgumentParser:
    p = crash_parser()
    p.prog = "tests.acceptance.crash.family"
    p.add_argument("--cap", type=int, default=CAP, help="children running at once per parent")
    return p


async def cancel(args: argparse.Namespace) -> int:
    """A process that cancels a parent and, with ``--die``, SIGKILLs itself right after the
    parent's cancel transition committed (in the transition observer, which runs before the
    engine starts cancelling the parent's children): its live children are left to the
    workers' recovery rounds. Prints ``{"state": ..., "requested": ...}`` if it lives on."""
    plan = {f"after_transition/{CANCELLED}": 1} if args.die else {}
    faults = Faults(plan, args.kill_log)
    service = Service(args.service, mode="count")
    engine = Engine(store_from_url(args.db), make_types(service, faults))
    engine.observers.transition.append(faults.on_transition)
    try:
        async with engine:
            for attempt in range(20):
                try:
                    done = await engine.cancel(
                        args.parent, reason=args.reason, actor="test canceller"
                    )
                    break
                except VersionConflict:  # busy: again
                    if attempt == 19:
                        raise
                    await asyncio.sleep(0.05)
            # Without --die: stay until the cascade (a background task) has run.
            for _ in range(200):
                left = [
                    c
                    for c in await engine.store.children(args.parent, limit=1000)
                    if not c.terminal and c.cancel is None
                ]
                if not left or not done.row.terminal:
                    break
                await asyncio.sleep(0.05)
            state = done.row.state
            print(json.dumps({"state": state, "requested": done.row.cancel is not None}))
            return 0
    finally:
        service.close()


def cancel_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tests.acceptance.crash.family cancel")
    p.add_argument("--db", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--kill-log", required=True)
    p.add_argument("--parent", required=True)
    p.add_argument("--reason", default="called off by the test")
    p.add_argument("--die", action="store_true", help="SIGKILL self right after the cancel")
    return p


def child_main(argv: Sequence[str]) -> int:
    """A worker; or, with ``cancel`` first, a process that cancels a parent (see
    :func:`cancel`)."""
    argv = list(argv)
    if argv[:1] == ["cancel"]:
        return asyncio.run(cancel(cancel_parser().parse_args(argv[1:])))
    return asyncio.run(run(parser().parse_args(argv)))


def prepare() -> None:
    parser().parse_args(["--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"])
    cancel_parser().parse_args(["--db", "x", "--service", "x", "--kill-log", "x", "--parent", "x"])


class FamilyZygote(Zygote):
    """The crash tests' zygote (:mod:`tests.acceptance.crash.zygote`) forking family workers
    (and cancellers)."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        ForkServer.__init__(
            self,
            log,
            "tests.acceptance.crash.family:child_main",
            preload=PRELOAD,
            prepare="tests.acceptance.crash.family:prepare",
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            name="family zygote",
            timeout=timeout,
        )
