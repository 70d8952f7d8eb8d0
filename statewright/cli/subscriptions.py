"""``statewright subscriptions add|list|show|remove|pause|resume``: who is told about which
transitions (webhooks, Python consumers; see ``Engine.subscribe``). A running ``statewright
serve --subscriptions`` (or ``statewright subscriptions deliver``) pumps and delivers them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Command, Group, Settings, command
from statewright.cli.output import emit_json, escape, out, parse_json_object, table

if TYPE_CHECKING:
    from statewright.engine.core import Engine
    from statewright.store.subscriptions import SubscriptionRecord

app = typer.Typer(
    name="subscriptions",
    cls=Group,
    help="Transition webhooks and Python consumers (at least once, in order per workflow).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

NameArg = Annotated[str, typer.Argument(help="The subscription's name.", show_default=False)]
Names = Annotated[list[str] | None, typer.Option(show_default=False)]


def _line(r: SubscriptionRecord) -> str:
    sub = r.subscription
    target = "consumer" if sub.consumer else f"webhook {escape(sub.url or '')}"
    state = "paused" if sub.paused else "active"
    where = escape(str(sub.filter.to_json() or "every transition"))
    return (
        f"subscription [bold]{escape(sub.name)}[/]: {target}, {where}; {state}, at seq {r.cursor}"
    )


def _show(s: Settings, record: SubscriptionRecord) -> None:
    emit_json(record.to_json()) if s.json else out.print(_line(record))


def add(
    s: Settings,
    name: NameArg,
    url: Annotated[
        str | None, typer.Option(help="The webhook's http(s) URL.", show_default=False)
    ] = None,
    consumer: Annotated[
        bool, typer.Option("--consumer", help="Read by a Python Consumer, not a webhook.")
    ] = False,
    type_: Annotated[
        list[str] | None,
        typer.Option(
            "--type", help="Only workflows of this type (repeatable).", show_default=False
        ),
    ] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            help="Only transitions entering this state (repeatable).", show_default=False
        ),
    ] = None,
    event: Annotated[
        list[str] | None,
        typer.Option(help="Only transitions by this event (repeatable).", show_default=False),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            help="Only messages emitted under this topic, each on its own (repeatable).",
            show_default=False,
        ),
    ] = None,
    terminal: Annotated[
        bool, typer.Option("--terminal", help="Only transitions into a terminal state.")
    ] = False,
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant's workflows.", show_default=False)
    ] = None,
    headers: Annotated[
        str | None,
        typer.Option(
            metavar="JSON", help="Extra request headers (a JSON object).", show_default=False
        ),
    ] = None,
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="STATEWRIGHT_SUBSCRIPTION_SECRET",
            help="Sign each body (X-Statewright-Signature: sha256=<HMAC>).",
            show_default=False,
        ),
    ] = None,
    start: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Hand on from after this log seq (0: the whole log); default: from now.",
            show_default=False,
        ),
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Declare it paused.")] = False,
) -> None:
    """Declare a subscription (or change the one of that name, its cursor kept). Refused
    (exit code 2) for a bad URL, filter or headers; nothing is written then."""
    from statewright.store.subscriptions import Subscription, SubscriptionFilter

    extra = parse_json_object(headers, "--headers") or {}
    sub = Subscription(
        name,
        SubscriptionFilter(
            types=tuple(type_ or ()),
            states=tuple(state or ()),
            events=tuple(event or ()),
            topics=tuple(topic or ()),
            terminal=terminal,
            tenant=tenant,
        ),
        url=url,
        consumer=consumer,
        headers=extra,
        secret=secret,
        paused=paused,
    )
    _show(s, with_engine(s, lambda e: e.subscribe(sub, start=start)))


def list_(s: Settings) -> None:
    """List the subscriptions."""
    found = with_engine(s, lambda e: e.subscriptions())
    if s.json:
        emit_json([r.to_json() for r in found])
        return
    if not found:
        out.print("no subscriptions")
        return
    rows = [
        (
            r.name,
            "consumer" if r.subscription.consumer else (r.subscription.url or ""),
            str(r.subscription.filter.to_json() or "-"),
            "paused" if r.subscription.paused else "active",
            str(r.cursor),
        )
        for r in found
    ]
    out.print(table(None, ["name", "target", "filter", "state", "cursor"], rows))


def show(s: Settings, name: NameArg) -> None:
    """Show one subscription (exit code 1 when there is none)."""
    _show(s, with_engine(s, lambda e: e.subscription(name)))


def remove(s: Settings, name: NameArg) -> None:
    """Remove a subscription (exit code 1 when there is none)."""

    async def go(e: Engine) -> None:
        await e.unsubscribe(name)

    with_engine(s, go)
    if s.json:
        emit_json({"removed": True})
        return
    out.print(f"subscription [bold]{escape(name)}[/] removed")


def pause(s: Settings, name: NameArg) -> None:
    """Pause a subscription: nothing new is handed on (it waits) until it is resumed."""
    _show(s, with_engine(s, lambda e: e.pause_subscription(name)))


def resume(s: Settings, name: NameArg) -> None:
    """Resume a subscription from where it paused."""
    _show(s, with_engine(s, lambda e: e.resume_subscription(name)))


def apply(
    s: Settings,
    path: Annotated[
        str, typer.Argument(metavar="FILE", help="A type's .json/.yaml file.", show_default=False)
    ],
) -> None:
    """Declare the subscriptions a type's file lists under ``subscriptions:`` (each changed
    in place when it exists, its cursor kept). Refused (exit code 2) for a bad file."""
    from statewright.engine.subscription_ops import in_file

    found = in_file(path)

    async def go(e: Engine) -> list[SubscriptionRecord]:
        return [await e.subscribe(sub) for sub in found]

    records = with_engine(s, go)
    if s.json:
        emit_json([r.to_json() for r in records])
        return
    for r in records:
        out.print(_line(r))
    if not records:
        out.print("no subscriptions in the file")


def deliver(s: Settings) -> None:
    """Pump the webhook subscriptions and deliver their notifications (and the alerts'
    already queued) until SIGINT/SIGTERM."""

    async def go(engine: Engine) -> None:
        import asyncio
        import signal

        from statewright.observability.delivery import AlertDelivery

        delivery = AlertDelivery(engine, alerts=False)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, delivery.stop)
        await delivery.run()

    with_engine(s, go)


_COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("add", add),
    ("list", list_),
    ("show", show),
    ("remove", remove),
    ("pause", pause),
    ("resume", resume),
    ("apply", apply),
    ("deliver", deliver),
]
for _name, _fn in _COMMANDS:
    app.command(_name, cls=Command)(command(_fn))
