"""Probes: ``/livez`` (the process answers), ``/ready`` (the store answers), ``/health`` (both,
plus the in-process worker), ``/health/workflows`` (503 while any workflow is stuck: past
its state's threshold, or parked for an operator, from the moment it parks).

``/ready`` asks the store's :meth:`~statewright.store.protocol.Store.ping`: a trivial query on
a connection of its own (SQLite: and a thread of its own), so it answers as fast as the
database does however many large reads the service is busy with; the pages those reads
build are encoded off the event loop (:mod:`statewright.http.pages`), which keeps answering.

They need no token: orchestrators and load balancers call them. ``/health/workflows`` shows
counts by type and state only, never ids or contexts: true counts, from aggregates over index
ranges (cheap however many workflows there are), plus the parked workflows (waiting for an
operator) by type, state and reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from statewright.errors import StatewrightError
from statewright.http.deps import EngineDep
from statewright.http.schemas import (
    ErrorOut,
    ParkedCount,
    Probe,
    StuckCount,
    VersionCount,
    WorkflowHealth,
)

router = APIRouter(tags=["health"])
READY_TIMEOUT = 5.0
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    200: {"model": Probe, "description": "Ready."},
    503: {"model": Probe, "description": "Not ready."},
}


async def _store_ok(request: Request) -> str | None:
    """None when the store answered its probe in time, else why not."""
    engine = request.app.state.engine
    try:
        await asyncio.wait_for(engine.store.ping(), READY_TIMEOUT)
    except TimeoutError:
        return f"the store did not answer within {READY_TIMEOUT:g}s"
    except StatewrightError as exc:
        return exc.message
    return None


def _worker_status(request: Request) -> str | None:
    task: asyncio.Task[None] | None = request.app.state.worker_task
    if task is None:
        return None
    if not task.done():
        return "running"
    return "stopped" if task.cancelled() or task.exception() is None else "crashed"


@router.get("/livez", summary="Liveness: the process answers")
async def livez() -> Probe:
    return Probe(status="ok")


@router.get("/ready", summary="Readiness: the store answers", responses=_UNAVAILABLE)
async def ready(request: Request) -> JSONResponse:
    problem = await _store_ok(request)
    probe = Probe(status="unavailable" if problem else "ok", store=problem or "ok")
    return JSONResponse(probe.model_dump(exclude_none=True), status_code=503 if problem else 200)


@router.get("/health", summary="Store and in-process worker", responses=_UNAVAILABLE)
async def health(request: Request) -> JSONResponse:
    problem = await _store_ok(request)
    worker = _worker_status(request)
    bad = problem is not None or worker == "crashed"
    probe = Probe(status="unavailable" if bad else "ok", store=problem or "ok", worker=worker)
    return JSONResponse(probe.model_dump(exclude_none=True), status_code=503 if bad else 200)


@router.get(
    "/health/workflows",
    summary="503 with counts by type and state while workflows are stuck",
    responses={
        200: {"model": WorkflowHealth, "description": "No workflow is stuck."},
        503: {
            "model": WorkflowHealth | ErrorOut,
            "description": "Some workflows are stuck (or, as an error, the store failed).",
        },
    },
)
async def workflows_health(engine: EngineDep) -> JSONResponse:
    # True counts from two aggregate statements over index ranges: no row is read, however
    # many workflows are stuck.
    groups = await engine.stuck_counts()
    parked = await engine.parked_totals()
    unregistered = await engine.unregistered_counts()
    stuck = sum(g.count for g in groups)
    body = WorkflowHealth(
        status="stuck" if stuck else "ok",
        stuck=stuck,
        by_state=[
            StuckCount(type=g.type, state=g.state, count=g.count, oldest_age=g.oldest_age)
            for g in groups
        ],
        parked=sum(p.count for p in parked),
        parked_by_state=[
            ParkedCount(
                type=p.type, state=p.state, reason=p.reason, count=p.count, oldest_age=p.oldest_age
            )
            for p in parked
        ],
        unregistered=sum(n for _, _, n in unregistered),
        unregistered_by_version=[
            VersionCount(type=t, machine_version=v, count=n) for t, v, n in unregistered
        ],
    )
    return JSONResponse(body.model_dump(), status_code=503 if stuck else 200)
