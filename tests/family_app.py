"""Child workflows for the surfaces' tests (HTTP, MCP, CLI ``--app``, the dashboard's server).

``shipment`` starts one ``parcel`` child per element of its context's ``parcels`` (at most 3
at once) and ends ``done`` once every one of them has ended; a ``parcel`` has no handler: it
waits for ``ship`` (it succeeds) or ``lose`` (it fails). The child events are the system's:
agents are never offered them as tools.
"""

from __future__ import annotations

from statewright import MachineBuilder, WorkflowType
from statewright.engine.children import all_done, fan_out, gather


def shipment_type() -> WorkflowType:
    b = MachineBuilder("shipment")
    b.state("fanning", description="Waits for its parcels.", initial=True)
    b.state("done", terminal=True).state("cancelled", terminal=True)
    b.event("child_done", roles=("system",)).event("child_failed", roles=("system",))
    b.event("cancel")
    for event in ("child_done", "child_failed"):
        b.transition(event, "fanning", "done", guard=all_done("parcels"), assign=gather())
        b.transition(event, "fanning", "fanning", assign=gather())
    b.transition("cancel", "fanning", "cancelled")
    handler = fan_out("parcel", "parcels", cap=3, input=lambda item: {"item": item})
    return WorkflowType(b.build(), handlers={"fanning": handler})


def parcel_type() -> WorkflowType:
    b = MachineBuilder("parcel")
    b.state("shipping", initial=True).state("shipped", terminal=True)
    b.state("failed", terminal=True).state("cancelled", terminal=True)
    b.event("ship").event("lose").event("cancel")
    b.transition("ship", "shipping", "shipped").transition("lose", "shipping", "failed")
    b.transition("cancel", "shipping", "cancelled")
    return WorkflowType(b.build(), runs_here=True, result=lambda c: {"item": c.get("item")})


TYPES = [shipment_type(), parcel_type()]
