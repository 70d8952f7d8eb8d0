"""A payment workflow whose type redacts a secret reference and the card number, and says
what it is doing in a summary of its own (for the redaction and summary tests).

``payment``: ``charging`` (a handler: a ``charge`` step whose result holds the secret; a card
ending in 0002 is declined, the step's error quoting the number) -> ``awaiting_warehouse``
(``captured``, its payload and context patch holding the secrets) -> ``shipped`` (``ship``, an
agent's event); or -> ``declined`` (``fatal_error``). ``payment_plain`` (no handler, the
default summary) and ``payment_broken`` (a summary hook that raises) have the same machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright import FatalError, Machine, MachineBuilder, Next, Run, WorkflowType
from statewright.engine.steps import StepKey

SECRET_REF = "sk_live_9f8e7d6c5b4a"
CARD = "4242424242424242"
DECLINED_CARD = "4000000000000002"
HIDDEN = "internal-bookkeeping-xyz"


def machine(name: str) -> Machine:
    return (
        MachineBuilder(name, 1, "Charge a card, then ship.")
        .state("charging", initial=True, description="Charging the card.")
        .state("awaiting_warehouse", description="Paid; the warehouse ships.")
        .state("declined", description="The card was declined.")
        .state("shipped", terminal=True, description="Shipped.")
        .event("captured", "The payment was captured.", roles=["system"])
        .event("fatal_error", "The charge failed for good.", roles=["system"])
        .event("ship", "The parcel left.", roles=["agent", "system"])
        .event("retry_charge", "Try another card.", roles=["agent"])
        .transition("captured", "charging", "awaiting_warehouse")
        .transition("fatal_error", "charging", "declined")
        .transition("retry_charge", "declined", "charging")
        .transition("ship", "awaiting_warehouse", "shipped")
        .build()
    )


def context(card: str = CARD) -> dict[str, Any]:
    return {
        "amount": 149.99,
        "currency": "EUR",
        "stripe_secret_ref": SECRET_REF,
        "customer": {"name": "Ada", "card": {"number": card, "exp": "12/30"}},
        "_internal": HIDDEN,
    }


async def charge(run: Run) -> Next:
    card = run.context["customer"]["card"]["number"]

    def call(key: StepKey) -> dict[str, Any]:
        if card.endswith("0002"):
            raise FatalError(f"card {card} was declined")
        return {"charge_id": "ch_1", "stripe_secret_ref": SECRET_REF, "echo": f"charged {card}"}

    result = await run.step("charge", call)
    return Next(
        "captured",
        {"amount": 149.99, "stripe_secret_ref": SECRET_REF, "memo": f"ref {SECRET_REF}"},
        context={"captured": True, "charge_id": result["charge_id"], "receipt": {"card": card}},
    )


def summary(ctx: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    done = "captured; waiting for the warehouse" if ctx.get("captured") else "pending"
    return (
        f"Payment of {ctx['amount']} {ctx['currency']} {done}",
        {"amount": ctx["amount"], "card_seen": "number" in ctx["customer"]["card"]},
    )


def broken_summary(ctx: Mapping[str, Any]) -> str:
    raise RuntimeError("this summary hook is broken")


REDACT = ("stripe_secret_ref", "customer.card.number", "receipt.card")
TYPES = [
    WorkflowType(machine("payment"), {"charging": charge}, summary=summary, redact=REDACT),
    # No handler, no summary hook: the default summary, redacted.
    WorkflowType(machine("payment_plain"), redact=REDACT),
    WorkflowType(machine("payment_broken"), summary=broken_summary, redact=REDACT),
]
SECRETS = (SECRET_REF, CARD, DECLINED_CARD)
