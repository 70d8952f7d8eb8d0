"""``statewright demo``: both examples end to end on an SQLite file, with a real crash.

Orders run in a separate worker process that is SIGKILLed in the middle of a payment;
recovery finishes them here. Then the refund-approval example runs (its 24-hour approval
timeout on a simulated clock). Finally every workflow is checked: terminal, charged exactly
once, and its replayed log equal to its row. Exit code 1 if any check fails.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.loading import import_file
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, escape, out, table
from statewright.errors import InvalidInput

if TYPE_CHECKING:
    from statewright.cli.demo_checks import Check
    from statewright.cli.demo_crash import Crash

DEMO_DB = ".statewright/demo.db"
DEMO_TYPES = {"order_fulfilment", "refund_approval"}
Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoFiles:
    folder: Path
    """The examples."""
    db: Path
    services: Path
    """The fake services' own SQLite file (it outlives the killed worker)."""
    log: Path
    """The worker process's output."""

    @classmethod
    def of(cls, folder: Path, db: Path) -> DemoFiles:
        return cls(
            folder,
            db,
            db.with_name(f"{db.stem}-services.db"),
            db.with_name(f"{db.stem}-worker.log"),
        )


def _examples_dir(given: Path | None) -> Path:
    """The folder holding ``order_fulfilment.py`` and its siblings.

    By default the copy the wheel installs under the package (``statewright/_examples``,
    see ``pyproject.toml``), else the ``examples/`` of the checkout this package runs from.
    """
    package = Path(__file__).resolve().parents[1]
    if given is None:
        installed = package / "_examples"
        given = installed if installed.is_dir() else package.parent / "examples"
    if not (given / "order_fulfilment.py").is_file():
        raise InvalidInput(
            f"the examples are not in {str(given)!r}: pass --examples with the examples/ "
            "folder of a statewright checkout"
        )
    return given


def _db_file(db: str | None) -> Path:
    from statewright.store import store_from_url

    store = store_from_url(db or DEMO_DB)
    path = getattr(store, "path", ":memory:")
    if path == ":memory:":
        raise InvalidInput("the demo needs an SQLite file: its worker runs in another process")
    return Path(path).resolve()


def _fresh(files: DemoFiles) -> None:
    """Delete the previous demo's files; refuse to touch a database that is not a demo's."""
    import asyncio

    from statewright.store import SQLiteStore

    db = files.db
    if db.exists():

        async def types_in() -> set[str]:
            store = SQLiteStore(db)
            await store.open()
            try:
                return {t for t, _, _ in await store.count_by_state()}
            finally:
                await store.close()

        other = asyncio.run(types_in()) - DEMO_TYPES
        if other:
            raise InvalidInput(
                f"{str(db)!r} holds other workflows ({', '.join(sorted(other))}): the demo "
                "starts from an empty database each run; pick another --db"
            )
    for base in (db, files.services):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{base}{suffix}").unlink(missing_ok=True)
    files.log.unlink(missing_ok=True)
    db.parent.mkdir(parents=True, exist_ok=True)


def demo(
    s: Settings,
    examples: Annotated[
        Path | None,
        typer.Option(
            envvar="STATEWRIGHT_EXAMPLES",
            show_envvar=True,
            help="The examples/ folder (default: the installed copy, or the checkout's).",
        ),
    ] = None,
) -> None:
    """Run the examples end to end on SQLite, SIGKILL a worker mid-payment, recover, check."""
    files = DemoFiles.of(_examples_dir(examples), _db_file(s.db))
    _fresh(files)
    orders = import_file(files.folder / "order_fulfilment.py")
    refunds = import_file(files.folder / "refund_approval.py")

    def say(text: str) -> None:
        if not s.json:
            out.print(f"  {escape(text)}")

    def section(title: str) -> None:
        if not s.json:
            out.print()
            out.rule(f"[bold]{title}", align="left")

    import asyncio

    started = time.monotonic()
    checks, rows = asyncio.run(_scenario(orders, refunds, files, say, section))
    ok = all(c.ok for c in checks)
    if s.json:
        emit_json(
            {
                "ok": ok,
                "db": str(files.db),
                "seconds": round(time.monotonic() - started, 2),
                "checks": checks,
                "workflows": rows,
            }
        )
    else:
        _report(checks, rows, files, time.monotonic() - started)
    if not ok:
        raise typer.Exit(1)


async def _scenario(
    orders: ModuleType, refunds: ModuleType, files: DemoFiles, say: Say, section: Say
) -> tuple[list[Check], list[dict[str, Any]]]:
    from statewright.cli.demo_checks import run_checks
    from statewright.cli.demo_crash import recover_and_finish, run_and_kill
    from statewright.clock import ManualClock
    from statewright.engine import Engine
    from statewright.store import SQLiteStore

    db = files.db
    gateway = orders.FakePaymentGateway(files.services)
    payments = refunds.FakePaymentsAPI(files.services)
    engine = Engine(SQLiteStore(db), [orders.order_type(gateway), refunds.refund_type(payments)])
    async with engine:
        section("1. Orders are placed")
        ids = list(orders.SAMPLE_ORDERS)
        for oid, order in orders.SAMPLE_ORDERS.items():
            await engine.start("order_fulfilment", order, workflow_id=oid, actor="checkout")
        await engine.send(
            "order-1005", "cancel", {"reason": "customer changed their mind"}, actor="agent"
        )
        say(f"{len(ids)} orders in {db.name}; the support agent cancelled order-1005 at once")

        section("2. A worker process runs them, and is killed mid-payment")
        crash = await run_and_kill(
            engine,
            gateway,
            ids,
            db=str(files.db),
            orders_file=files.folder / "order_fulfilment.py",
            services=files.services,
            log=files.log,
        )
        _tell_crash(crash, say)

        section("3. Recovery")
        recovered, processed = await recover_and_finish(engine)
        for r in recovered:
            say(
                f"{r.workflow_id} in {r.state}: held by the dead worker {r.owner}; "
                f"recovery policy '{r.action}'"
                + (": its handler runs again" if r.action == "rerun" else "")
            )
        calls = {c["key"]: c["calls"] for c in gateway.charges()}
        for key in crash.executing:
            if key in crash.charged and calls.get(key) == 1:
                say(
                    f"step {key} was executing: the gateway says it was charged, so its "
                    "result was adopted (reconcile) and nothing was sent again"
                )
            else:
                say(
                    f"step {key} was executing: it ran again (requests for the key: "
                    f"{calls.get(key, 0)})"
                )
        say(f"a fresh worker then ran {processed} workflow step(s) to the end")

        section("4. Webhooks and people")
        for oid in ids:
            if (await engine.get(oid)).state == "fulfillment_triggered":
                await orders.ship_and_deliver(engine, oid)
        await engine.send("order-1003", "refund", {"reason": "arrived broken"}, actor="agent")
        for oid in ("order-1001", "order-1002"):
            await engine.send(oid, "close", {}, actor="operator")
        say(
            "warehouse and carrier webhooks shipped and delivered the paid orders; an "
            "operator closed order-1001 and order-1002; the agent refunded order-1003"
        )

        section("5. Refund approvals (the 24-hour approval timeout on a simulated clock)")
        clock = ManualClock(time.time())
        refund_engine = Engine(SQLiteStore(db), [refunds.refund_type(payments)], clock=clock)
        async with refund_engine:
            await refunds.run_refunds(refund_engine, clock, say=say)

        return await run_checks(engine, crash, orders.SAMPLE_ORDERS, gateway, payments)


def _tell_crash(crash: Crash, say: Say) -> None:
    say(
        f"worker process {crash.pid} (`statewright worker`, log: {crash.log.name}) was "
        f"killed with SIGKILL while {len(crash.executing)} step(s) were executing"
    )
    for wid, state in crash.states.items():
        lease = f", leased by {crash.leases[wid]}" if wid in crash.leases else ""
        say(f"  {wid}: {state}{lease}")
    if crash.charged:
        say(
            f"the gateway had already charged {', '.join(crash.charged)}: the money moved, "
            "but the worker never heard back"
        )


def _report(
    checks: list[Check], rows: list[dict[str, Any]], files: DemoFiles, seconds: float
) -> None:
    db, folder = files.db, files.folder
    out.print()
    out.rule("[bold]6. Checks", align="left")
    for c in checks:
        mark = "[green]✓[/]" if c.ok else "[red]✗[/]"
        out.print(f"  {mark} {escape(c.name)}" + (f": {escape(c.detail)}" if c.detail else ""))
    out.print()
    out.print(
        table(
            "workflows",
            ["id", "type", "state", "v", "replay", "paid"],
            [
                (
                    r["id"],
                    r["type"],
                    r["state"],
                    r["version"],
                    "yes" if r["replay_ok"] else "NO",
                    r["charged"],
                )
                for r in rows
            ],
        )
    )
    orders_app = shlex.quote(_short(folder / "order_fulfilment.py"))
    refunds_app = shlex.quote(_short(folder / "refund_approval.py"))
    sw, where = shlex.quote(_prog()), f"--db {shlex.quote(_short(db))}"
    out.print(f"\ndatabase: [bold]{escape(str(db))}[/] (finished in {seconds:.1f}s)")
    out.print("next, try:")
    for cmd in (
        f"{sw} show order-1001 {where} --app {orders_app}",
        f"{sw} history order-1001 {where}",
        f"{sw} history refund-timeout {where}",
        f"{sw} list {where}",
        f"{sw} diagram refund_approval --id refund-timeout {where} --app {refunds_app}",
        f"{sw} replay order-1003 {where} --app {orders_app}",
    ):
        out.print(f"  {escape(cmd)}", soft_wrap=True)
    verdict = "[green]all checks passed[/]" if all(c.ok for c in checks) else "[red]FAILED[/]"
    out.print(f"\n{verdict}")


def _short(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _prog() -> str:
    """How to run this CLI again: ``statewright`` if that is on PATH, else its path."""
    argv0 = Path(sys.argv[0])
    found = shutil.which("statewright")
    if argv0.name != "statewright" or (found and Path(found).resolve() == argv0.resolve()):
        return "statewright"
    return _short(argv0.absolute())
