"""The handlers of parcel.yaml (``--app`` this file): the worker's side of a deployment whose
HTTP service registers the definition file alone."""

from __future__ import annotations

from pathlib import Path

from statewright import Next, Run, WorkflowType
from statewright.definition import load_path

MACHINE = load_path(Path(__file__).with_name("parcel.yaml"))


async def check(run: Run) -> str:
    return "checked"


async def pack(run: Run) -> Next | None:
    label = await run.next_input("label")
    if label is None:
        return None  # idle until the label is posted
    return Next("packed", context={"label": label["code"]})


async def ship(run: Run) -> str:
    return "sent"


TYPES = [WorkflowType(MACHINE, {"received": check, "packing": pack, "shipping": ship})]
