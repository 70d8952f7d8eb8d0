"""A refund-approval agent that cannot pay out without the approval it needs.

validating -> checking_policy -> (awaiting_approval ->) paying_out -> notifying -> done.
The policy check fires one event whose guarded transitions pick the way on (first passing
guard wins): over the hard limit is rejected, under the auto-approve limit pays out at
once, anything else waits for a manager. Waiting is a persisted state with durable timers:
a reminder (a self-transition that re-runs the "ask the approver" handler) and a timeout
that fails the refund. Only ``approval_granted`` / ``approval_denied`` (approvers' events)
move it on; there is no edge from waiting to paying out on anything else.

Run it: ``python examples/refund_approval.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fake_services import FakeNotifier, FakePaymentsAPI

from statewright import (
    Engine,
    IllegalTransition,
    Machine,
    MachineBuilder,
    ManualClock,
    Next,
    Run,
    SQLiteStore,
    Worker,
    WorkflowType,
)

HOUR = 3600.0
SYSTEM = ("system", "operator")
APPROVER = ("approver",)


def refund_machine(
    *, approval_timeout: float = 24 * HOUR, reminder_after: float = 20 * HOUR
) -> Machine:
    b = MachineBuilder("refund_approval", 1, "A customer refund, approved by policy or a manager.")
    b.state("validating", initial=True, stuck_after=300.0, description="Checking the request.")
    b.state("checking_policy", stuck_after=300.0, description="Applying the refund policy.")
    b.state(
        "awaiting_approval",
        after={reminder_after: "approval_reminder", approval_timeout: "approval_timeout"},
        stuck_after=approval_timeout,
        description="Waiting for a manager's decision.",
    )
    b.state("paying_out", stuck_after=600.0, description="Sending the money back.")
    b.state("notifying", stuck_after=600.0, description="Telling the customer.")
    b.state("done", terminal=True, description="Refunded and notified.")
    b.state("rejected", terminal=True, description="Refused by validation, policy or a manager.")
    b.state("failed", terminal=True, description="Could not be completed.")

    b.event("validated", "The request is well-formed.", roles=SYSTEM)
    b.event("validation_failed", "The request is malformed.", roles=SYSTEM)
    b.event(
        "policy_checked",
        "The policy verdict, with the amount and the limits.",
        roles=SYSTEM,
        payload_schema={
            "type": "object",
            "required": ["amount_cents", "auto_approve_under_cents", "hard_limit_cents"],
            "properties": {
                k: {"type": "integer", "minimum": 0}
                for k in ("amount_cents", "auto_approve_under_cents", "hard_limit_cents")
            },
        },
    )
    decision = {
        "type": "object",
        "required": ["approver"],
        "properties": {
            "approver": {"type": "string", "minLength": 1},
            "comment": {"type": "string"},
        },
    }
    b.event(
        "approval_granted",
        "A manager approved the refund.",
        roles=APPROVER,
        approval=True,
        payload_schema=decision,
    )
    b.event(
        "approval_denied",
        "A manager rejected the refund.",
        roles=APPROVER,
        approval=True,
        payload_schema=decision,
    )
    b.event("approval_reminder", "Nudge the approver again (timer).", roles=SYSTEM)
    b.event("approval_timeout", "Nobody decided in time (timer): the refund fails.", roles=SYSTEM)
    b.event("paid_out", "The payments API confirmed the payout.", roles=SYSTEM)
    b.event("customer_notified", "The customer was told.", roles=SYSTEM)
    b.event("fatal_error", "An unrecoverable error.", roles=SYSTEM)

    b.transition("validated", "validating", "checking_policy")
    b.transition("validation_failed", "validating", "rejected")
    b.transition(
        "policy_checked",
        "checking_policy",
        "rejected",
        guard="payload.amount_cents > payload.hard_limit_cents",
        description="Over the hard limit: nobody may approve it.",
    )
    b.transition(
        "policy_checked",
        "checking_policy",
        "paying_out",
        guard="payload.amount_cents < payload.auto_approve_under_cents",
        description="Small refund: approved by policy.",
    )
    b.transition(
        "policy_checked", "checking_policy", "awaiting_approval", description="Needs a manager."
    )
    b.transition("approval_granted", "awaiting_approval", "paying_out")
    b.transition("approval_denied", "awaiting_approval", "rejected")
    b.transition("approval_reminder", "awaiting_approval", "awaiting_approval")
    b.transition("approval_timeout", "awaiting_approval", "failed")
    b.transition("paid_out", "paying_out", "notifying")
    b.transition("customer_notified", "notifying", "done")
    b.transition(
        "fatal_error", ["validating", "checking_policy", "paying_out", "notifying"], "failed"
    )
    return b.build()


def _problems(c: dict[str, Any]) -> list[str]:
    out = []
    amount = c.get("amount_cents")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        out.append("amount_cents must be a positive integer")
    if not isinstance(c.get("order_id"), str) or not c["order_id"]:
        out.append("order_id is required")
    if "@" not in str(c.get("customer", "")):
        out.append("customer must be an e-mail address")
    return out


def refund_type(
    payments: FakePaymentsAPI | None = None,
    notifier: FakeNotifier | None = None,
    *,
    auto_approve_under_cents: int = 5_000,
    hard_limit_cents: int = 100_000,
    approval_timeout: float = 24 * HOUR,
    reminder_after: float = 20 * HOUR,
) -> WorkflowType:
    pay = payments or FakePaymentsAPI()
    mail = notifier or FakeNotifier()

    def validate(run: Run) -> Next:
        problems = _problems(run.context)
        return Next("validation_failed", {"problems": problems}) if problems else Next("validated")

    def check_policy(run: Run) -> Next:
        return Next(
            "policy_checked",
            {
                "amount_cents": run.context["amount_cents"],
                "auto_approve_under_cents": auto_approve_under_cents,
                "hard_limit_cents": hard_limit_cents,
            },
        )

    async def ask_approver(run: Run) -> None:
        # Runs on entering the state and again after each reminder (a self-transition):
        # one step per visit, so a crash never sends the same request twice.
        c = run.context
        await run.step(
            f"ask_approver_v{run.workflow.version}",
            lambda key: mail.send(
                key,
                "refund-approvers@example.com",
                f"Please approve refund {run.id}: {c['amount_cents']} cents for {c['order_id']}",
            ),
        )
        return None  # stay paused: only an approver's decision or a timer moves on

    async def pay_out(run: Run) -> Next:
        paid = await run.step(
            "payout",
            lambda key: pay.payout(key, run.context["amount_cents"]),
            reconcile=pay.lookup,
        )
        return Next("paid_out", paid, context=paid)

    async def notify(run: Run) -> Next:
        text = f"Your refund {run.context['payout_id']} is on its way."
        await run.step(
            "notify_customer",
            lambda key: mail.send(key, run.context["customer"], text),
            safe_to_repeat=True,
        )
        return Next("customer_notified")

    return WorkflowType(
        refund_machine(approval_timeout=approval_timeout, reminder_after=reminder_after),
        handlers={
            "validating": validate,
            "checking_policy": check_policy,
            "awaiting_approval": ask_approver,
            "paying_out": pay_out,
            "notifying": notify,
        },
        on_transient=None,  # no retry edges: transient errors re-run the handler in place
        approve_event="approval_granted",
        deny_event="approval_denied",
    )


TYPES = [refund_type()]

SAMPLE_REFUNDS: dict[str, dict[str, Any]] = {
    "refund-small": {
        "order_id": "order-1002",
        "amount_cents": 1_800,
        "customer": "li@example.com",
    },
    "refund-approved": {
        "order_id": "order-1003",
        "amount_cents": 8_900,
        "customer": "ada@example.com",
    },
    "refund-denied": {
        "order_id": "order-2001",
        "amount_cents": 45_000,
        "customer": "bob@example.com",
    },
    "refund-timeout": {
        "order_id": "order-2002",
        "amount_cents": 25_000,
        "customer": "cy@example.com",
    },
    "refund-huge": {
        "order_id": "order-2003",
        "amount_cents": 990_000,
        "customer": "dee@example.com",
    },
    "refund-invalid": {"order_id": "", "amount_cents": -5, "customer": "nobody"},
}


async def run_refunds(
    engine: Engine, clock: ManualClock, say: Callable[[str], None] = print
) -> dict[str, str]:
    """Run the sample refunds through every path; returns ``{refund id: state}``."""
    worker = Worker(engine)
    for rid, request in SAMPLE_REFUNDS.items():
        await engine.start("refund_approval", request, workflow_id=rid, actor="support-agent")
    await worker.run_until_idle()
    paused = [r.id for r in await engine.list_workflows() if r.state == "awaiting_approval"]
    say(
        f"paused for a manager: {', '.join(paused)}; "
        f"allowed now: {', '.join(await engine.allowed_events(paused[0]))}"
    )
    try:  # an agent claiming the money went out does not skip the approval
        await engine.send("refund-approved", "paid_out", {}, actor="support-agent")
    except IllegalTransition as exc:
        say(f"refused: {exc.message}")
    await engine.approve("refund-approved", approver="maria", comment="damaged in transit")
    await engine.deny("refund-denied", approver="maria", comment="outside the return window")
    await worker.run_until_idle()
    clock.advance(21 * HOUR)
    await worker.run_until_idle()
    say(
        "21 hours later the approver of refund-timeout was reminded; 3 hours after that the "
        "request timed out"
    )
    clock.advance(3 * HOUR)
    await worker.run_until_idle()
    states = {}
    for rid in SAMPLE_REFUNDS:
        row = await engine.get(rid)
        trail = " -> ".join(t.to_state for t in await engine.history(rid))
        say(f"{rid}: {row.state}  ({trail})")
        states[rid] = row.state
    return states


def main() -> dict[str, str]:
    payments = FakePaymentsAPI()
    clock = ManualClock()
    engine = Engine(SQLiteStore(":memory:"), [refund_type(payments)], clock=clock)

    async def go() -> dict[str, str]:
        async with engine:
            states = await run_refunds(engine, clock)
        for p in payments.payouts():
            print(f"paid out {p['key']}: {p['amount_cents']} cents")
        return states

    return asyncio.run(go())


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)  # rejected transitions are shown by main()
    main()
