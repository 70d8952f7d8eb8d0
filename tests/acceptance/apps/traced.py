"""Two handlers in a row, each with a step, for the trace tests (``--app`` this file).

``order``: ``charging`` runs step ``charge`` then moves on (``charged``); ``shipping`` runs
step ``ship`` and finishes. A context ``{"fail": true}`` makes ``ship`` raise a fatal error.
"""

from __future__ import annotations

from statewright import FatalError, MachineBuilder, Next, Run, WorkflowType

MACHINE = (
    MachineBuilder("order")
    .state("charging", initial=True)
    .state("shipping")
    .state("done", terminal=True)
    .state("failed", terminal=True)
    .event("charged")
    .event("shipped")
    .event("fail")
    .transition("charged", "charging", "shipping")
    .transition("shipped", "shipping", "done")
    .transition("fail", ["charging", "shipping"], "failed")
    .build()
)


async def _charge(key: str) -> dict[str, str]:
    return {"receipt": f"r-{key}"}


async def charge(run: Run) -> Next:
    receipt = await run.step("charge", _charge)
    return Next("charged", context={"receipt": receipt["receipt"]})


async def ship(run: Run) -> Next:
    async def _ship(key: str) -> str:
        if run.context.get("fail"):
            raise FatalError("no address")
        return "sent"

    await run.step("ship", _ship)
    return Next("shipped")


TYPES = [WorkflowType(MACHINE, {"charging": charge, "shipping": ship}, on_fatal="fail")]
