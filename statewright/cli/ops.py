"""Operations: init, stuck, replay, worker."""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.loading import db_path, with_engine
from statewright.cli.options import Settings
from statewright.cli.output import (
    LogFormat,
    LogFormatOption,
    duration,
    emit_json,
    err,
    escape,
    out,
    table,
    use_log_format,
)
from statewright.errors import InvalidInput

if TYPE_CHECKING:
    from statewright.engine import Engine, Worker
    from statewright.engine.core import Stuck

log = logging.getLogger(__name__)


def init(s: Settings) -> None:
    """Create the database, or migrate it to the current schema; print where it is."""

    async def go(engine: Engine) -> dict[str, Any]:
        return {"db": db_path(engine), "types": sorted(t.name for t in engine.types)}

    info = with_engine(s, go)
    if s.json:
        emit_json(info)
    else:
        out.print(f"database ready: [bold]{escape(info['db'])}[/]")
        out.print(f"workflow types: {escape(', '.join(info['types']))}")


STUCK_SHOWN = 1000
"""Stuck workflows the command lists at most (it counts them all)."""


def stuck(s: Settings) -> None:
    """Non-terminal workflows that have sat in their state longer than its threshold."""

    async def go(engine: Engine) -> tuple[list[Stuck], int]:
        total = sum(g.count for g in await engine.stuck_counts())
        return await engine.stuck(limit=STUCK_SHOWN), total

    found, total = with_engine(s, go)
    if s.json:
        emit_json(
            [{"workflow": x.workflow, "age": x.age, "threshold": x.threshold} for x in found]
        )
        return
    if not found:
        out.print("no stuck workflows")
        return
    out.print(
        table(
            f"{total} stuck workflow(s)"
            + (f", the first {len(found)} by type, state and age" if total > len(found) else ""),
            ["id", "type", "state", "in state", "threshold", "error"],
            [
                (
                    x.workflow.id,
                    x.workflow.type,
                    x.workflow.state,
                    duration(x.age),
                    duration(x.threshold),
                    x.workflow.last_error or "",
                )
                for x in found
            ],
        )
    )


def replay(s: Settings, workflow_id: Annotated[str, typer.Argument(help="Workflow id.")]) -> None:
    """Rebuild a workflow from its transition log and compare it with the stored row."""
    replayed = with_engine(s, lambda e: e.check(workflow_id))
    if s.json:
        emit_json({"ok": True, "workflow_id": workflow_id, "replayed": replayed})
        return
    out.print(
        f"[green]OK[/] replaying the log of {escape(workflow_id)} gives the stored row: "
        f"state {escape(str(replayed.state))}, version {replayed.version}"
    )


def worker(
    s: Settings,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="STATEWRIGHT_CONCURRENCY",
            show_envvar=True,
            help="Workflows run at once.",
        ),
    ] = 8,
    lease_seconds: Annotated[
        float,
        typer.Option(
            min=1.0,
            envvar="STATEWRIGHT_LEASE_SECONDS",
            show_envvar=True,
            help="How long a claim lasts without a heartbeat.",
        ),
    ] = 30.0,
    poll_interval: Annotated[
        float,
        typer.Option(
            min=0.01,
            envvar="STATEWRIGHT_POLL_INTERVAL",
            show_envvar=True,
            help="Longest wait between claims when idle (a wake-up from the store usually "
            "ends it sooner); also how often running handlers are checked for cancel requests.",
        ),
    ] = 0.5,
    grace: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            envvar="STATEWRIGHT_GRACE",
            show_envvar=True,
            help="On SIGTERM/SIGINT, seconds running handlers get to finish before they are "
            "cancelled (their workflows are then left for another worker). Default: no limit; "
            "a second signal cancels them at once.",
        ),
    ] = None,
    cancel_grace: Annotated[
        float,
        typer.Option(
            min=0.0,
            envvar="STATEWRIGHT_CANCEL_GRACE",
            show_envvar=True,
            help="Seconds a handler has to stop by itself after a cancel request before its "
            "task is cancelled.",
        ),
    ] = 5.0,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            envvar="STATEWRIGHT_THREADS",
            show_envvar=True,
            help="Threads that run synchronous handlers, step actions and reconcile hooks "
            "(default: the concurrency, at least 4). Async handlers run on the event loop.",
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Run one round of due work.")] = False,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Run until nothing is due, then exit.")
    ] = False,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Run the handlers and timers of due workflows (SIGINT/SIGTERM stop it cleanly).

    Recovers work held by dead workers first. Without --once or --until-idle it runs until
    signalled: it stops claiming, hands back work it claimed but has not started, lets the
    running handlers finish and persist (see --grace), releases its leases and exits 0.
    """
    if once and until_idle:
        raise InvalidInput("--once and --until-idle exclude each other")
    use_log_format(log_format)
    # Imported here: OpenTelemetry is only needed by this command.
    from statewright.engine import Worker, recover
    from statewright.observability.tracing import attach_tracing

    async def go(engine: Engine) -> dict[str, Any]:
        attach_tracing(engine)  # span events per transition when a tracer provider is set
        w = Worker(
            engine,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval=poll_interval,
            cancel_grace=cancel_grace,
            threads=threads,
        )
        if log_format is LogFormat.json:
            log.info(
                "worker started",
                extra={"action": "worker_started", "worker_id": w.id, "types": w.types},
            )
        elif not s.json:
            err.print(f"worker {w.id} on {escape(db_path(engine))}: {escape(', '.join(w.types))}")
        recovered = await recover(engine, worker_id=w.id, lease_seconds=lease_seconds)
        # w.processed counts handler runs (and timers fired), a chain's each: the claims
        # run_once / run_until_idle return would count a chain once.
        if once:
            await w.run_once()
        elif until_idle:
            await w.run_until_idle()
        else:
            await _run_until_signalled(w, grace)
        return {"worker_id": w.id, "recovered": len(recovered), "processed": w.processed}

    result = with_engine(s, go)
    if s.json:
        emit_json(result)
    else:
        out.print(
            f"worker stopped: recovered {result['recovered']}, "
            f"processed {result['processed']} workflow step(s)"
        )


async def _run_until_signalled(w: Worker, grace: float | None) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    received = 0

    def on_signal() -> None:
        nonlocal received
        received += 1
        # The first signal stops gracefully; another one cancels the running handlers.
        w.stop(grace if received == 1 else 0.0)

    for sig in signals:
        loop.add_signal_handler(sig, on_signal)
    try:
        await w.run(recover=True)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return w.processed
