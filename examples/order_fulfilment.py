"""Order fulfilment as a durable state machine.

created -> inventory_reserved -> payment_authorized -> payment_captured ->
fulfillment_triggered -> shipped -> delivered -> closed, with ``cancel`` allowed only
before the money is taken and ``refund`` only once the parcel is on its way.

Workers run the automatic states (reserve stock, authorize, capture, hand over to the
warehouse); each external call is an idempotent :meth:`Run.step` whose key is handed to the
fake service (``fake_services.py``) as its idempotency key, so a retried or recovered step
never charges twice.
Shipping and delivery arrive as external events (warehouse and carrier webhooks).

Run it: ``python examples/order_fulfilment.py``, or serve it to a worker with
``statewright worker --app examples/order_fulfilment.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fake_services import FakePaymentGateway, FakeWarehouse, PaymentDeclined

from statewright import (
    Engine,
    IllegalTransition,
    Machine,
    MachineBuilder,
    Next,
    RetryPolicy,
    Run,
    SQLiteStore,
    Worker,
    WorkflowType,
)

DAY = 86400.0
AGENT = ("agent", "operator")
SYSTEM = ("system", "operator")


def _schema(**props: str) -> dict[str, Any]:
    """An object schema whose listed string properties are required."""
    return {
        "type": "object",
        "required": list(props),
        "properties": {
            p: {"type": "string", "minLength": 1, "description": d} for p, d in props.items()
        },
    }


def order_machine() -> Machine:
    b = MachineBuilder("order_fulfilment", 1, "An order from checkout to the customer's door.")
    b.state("created", initial=True, stuck_after=300.0, description="Order placed.")
    b.state("inventory_reserved", stuck_after=300.0, description="Stock is held.")
    b.state("payment_authorized", stuck_after=300.0, description="The card is authorized.")
    b.state("payment_captured", stuck_after=300.0, description="The money is taken.")
    b.state(
        "fulfillment_triggered",
        stuck_after=2 * DAY,
        description="The warehouse is picking and packing.",
    )
    b.state("shipped", stuck_after=10 * DAY, description="On its way with the carrier.")
    b.state(
        "delivered",
        after={30 * DAY: "close"},
        description="Delivered; refundable until the return window closes.",
    )
    b.state("closed", terminal=True, description="Complete; the return window is over.")
    b.state("cancelled", terminal=True, description="Cancelled before any money was taken.")
    b.state("refunded", terminal=True, description="The customer got their money back.")

    b.event(
        "reserve_inventory",
        "Stock was reserved.",
        roles=SYSTEM,
        payload_schema=_schema(reservation_id="Warehouse reservation."),
    )
    b.event(
        "authorize_payment",
        "The card was authorized.",
        roles=SYSTEM,
        payload_schema=_schema(authorization_id="Gateway authorization."),
    )
    b.event(
        "capture_payment",
        "The payment was captured.",
        roles=SYSTEM,
        payload_schema=_schema(charge_id="Gateway charge."),
    )
    b.event(
        "trigger_fulfillment",
        "The warehouse accepted the order.",
        roles=SYSTEM,
        payload_schema=_schema(fulfilment_id="Warehouse fulfilment."),
    )
    b.event(
        "ship",
        "The parcel left the warehouse (warehouse webhook).",
        roles=SYSTEM,
        payload_schema=_schema(tracking_number="Carrier tracking number."),
        # The webhook's data reaches the context through the event's own action, in the
        # same transaction: no caller does a read-modify-write of the context.
        assign={"tracking_number": "payload.tracking_number"},
    )
    b.event(
        "deliver",
        "The carrier delivered the parcel (carrier webhook).",
        roles=SYSTEM,
        assign={"delivered_at": "payload.delivered_at"},
    )
    b.event(
        "cancel",
        "Cancel the order. Only possible before the payment is captured.",
        roles=AGENT,
        payload_schema=_schema(reason="Why it is cancelled."),
    )
    b.event(
        "refund",
        "Refund a shipped or delivered order.",
        roles=AGENT,
        payload_schema=_schema(reason="Why it is refunded."),
    )
    b.event(
        "close",
        "Close a delivered order (fired by a timer when the return window ends).",
        roles=(*AGENT, "system"),
    )

    b.transition("reserve_inventory", "created", "inventory_reserved")
    b.transition("authorize_payment", "inventory_reserved", "payment_authorized")
    b.transition("capture_payment", "payment_authorized", "payment_captured")
    b.transition("trigger_fulfillment", "payment_captured", "fulfillment_triggered")
    b.transition("ship", "fulfillment_triggered", "shipped")
    b.transition("deliver", "shipped", "delivered")
    b.transition("close", "delivered", "closed")
    b.transition("cancel", ["created", "inventory_reserved", "payment_authorized"], "cancelled")
    b.transition("refund", ["shipped", "delivered"], "refunded")
    return b.build()


def order_type(
    gateway: FakePaymentGateway | None = None, warehouse: FakeWarehouse | None = None
) -> WorkflowType:
    """The machine plus handlers calling the (fake) services; inject them to inspect them."""
    pay = gateway or FakePaymentGateway.from_env()
    stock = warehouse or FakeWarehouse()

    async def reserve(run: Run) -> Next:
        c = run.context
        # The warehouse honours keys, so re-running an interrupted reservation is safe.
        res = await run.step(
            "reserve", lambda key: stock.reserve(key, c["sku"], c["quantity"]), safe_to_repeat=True
        )
        return Next("reserve_inventory", res, context=res)

    async def authorize(run: Run) -> Next:
        c = run.context
        try:
            auth = await run.step(
                "authorize",
                lambda key: pay.authorize(key, c["amount_cents"]),
                reconcile=pay.lookup,
            )
        except PaymentDeclined as exc:
            await run.step(
                "release", lambda key: stock.release(c["reservation_id"]), safe_to_repeat=True
            )
            return Next("cancel", {"reason": exc.message})
        return Next("authorize_payment", auth, context=auth)

    async def capture(run: Run) -> Next:
        c = run.context
        # After a crash mid-capture the gateway is asked (reconcile) whether this key was
        # charged, instead of charging blindly again.
        charge = await run.step(
            "capture",
            lambda key: pay.capture(key, c["authorization_id"], c["amount_cents"]),
            reconcile=pay.lookup,
        )
        return Next("capture_payment", charge, context=charge)

    async def fulfil(run: Run) -> Next:
        c = run.context
        f = await run.step(
            "fulfil",
            lambda key: stock.create_fulfilment(key, c["reservation_id"]),
            safe_to_repeat=True,
        )
        return Next("trigger_fulfillment", f, context=f)

    return WorkflowType(
        order_machine(),
        handlers={
            "created": reserve,
            "inventory_reserved": authorize,
            "payment_authorized": capture,
            "payment_captured": fulfil,
        },
        retry=RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=30.0),
        # No error edges in this machine: a fatal error parks the order with its error,
        # where `statewright stuck` shows it and an operator can cancel it.
        on_transient=None,
        on_fatal=None,
    )


TYPES = [order_type()]

SAMPLE_ORDERS: dict[str, dict[str, Any]] = {
    "order-1001": {"sku": "BOOK-42", "quantity": 1, "amount_cents": 2_599},
    "order-1002": {"sku": "MUG-7", "quantity": 2, "amount_cents": 1_800},
    "order-1003": {"sku": "LAMP-3", "quantity": 1, "amount_cents": 8_900},
    "order-1004": {"sku": "DESK-1", "quantity": 1, "amount_cents": 950_000},  # declined
    "order-1005": {"sku": "PEN-9", "quantity": 10, "amount_cents": 1_200},  # cancelled early
}


async def ship_and_deliver(engine: Engine, order_id: str) -> None:
    """What the warehouse and carrier webhooks would send."""
    await engine.send(
        order_id, "ship", {"tracking_number": f"TRK-{order_id.upper()}"}, actor="warehouse"
    )
    await engine.send(order_id, "deliver", {}, actor="carrier")


async def run_orders(engine: Engine, say: Callable[[str], None] = print) -> dict[str, str]:
    """Start the sample orders, run them to the end, and return ``{order id: state}``."""
    for order_id, order in SAMPLE_ORDERS.items():
        await engine.start("order_fulfilment", order, workflow_id=order_id, actor="checkout")
    await engine.send(
        "order-1005", "cancel", {"reason": "customer changed their mind"}, actor="agent"
    )
    say("started 5 orders; order-1005 cancelled by the support agent before any work")
    await Worker(engine).run_until_idle()
    for order_id in ("order-1001", "order-1002", "order-1003"):
        await ship_and_deliver(engine, order_id)
    try:
        await engine.send("order-1001", "cancel", {"reason": "too late"}, actor="agent")
    except IllegalTransition as exc:
        say(f"refused: {exc.message}")
    await engine.send("order-1002", "close", {}, actor="operator")
    await engine.send("order-1001", "close", {}, actor="operator")
    await engine.send("order-1003", "refund", {"reason": "arrived broken"}, actor="agent")
    states = {r.id: r.state for r in await engine.list_workflows()}
    for order_id, state in sorted(states.items()):
        last = (await engine.history(order_id))[-1]
        why = f": {last.payload['reason']}" if "reason" in last.payload else ""
        say(f"{order_id}: {state} (after {last.event!r} by {last.actor}{why})")
    return states


def main() -> dict[str, str]:
    gateway = FakePaymentGateway()
    engine = Engine(SQLiteStore(":memory:"), [order_type(gateway)])

    async def go() -> dict[str, str]:
        async with engine:
            states = await run_orders(engine)
            # A retried capture with the same key is answered from the gateway's records.
            await gateway.capture("order-1001:capture", "auth_x", 2_599)
            for charge in gateway.charges():
                print(
                    f"charged {charge['key']}: {charge['amount_cents']} cents "
                    f"({charge['calls']} request(s), one charge)"
                )
            return states

    return asyncio.run(go())


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)  # rejected transitions are shown by main()
    main()
