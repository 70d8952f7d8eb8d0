"""Forks and imports against a payment service that does not deduplicate (issue 22, items 3
and 5), with real worker processes and a real PostgreSQL: a fork never calls a step a second
time behind the ledger's back (an unknown outcome is resolved on the source first, a source a
worker holds is not forked), and a tampered archive imported while a worker runs charges
nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from statewright import Applied, Engine, StatewrightError, store_from_url
from statewright.errors import StepUnresolved, WorkflowBusy
from tests.acceptance.apps.exactly_once import TYPES, Service
from tests.acceptance.test_exactly_once import eventually, fork_worker, markers, processes
from tests.forkserver import ForkServer


def _charges(service: Service) -> list[str]:
    return [c[1] for c in service.charges()]


@pytest.mark.acceptance
async def test_a_parked_charge_forked_is_charged_once(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    """The charge's call timed out after charging and no hook can tell: the workflow parks.
    Its fork (latest version, as the dashboard's button does) is refused until the step is
    resolved on the source; then the fork carries the charge's result. The service, which
    charges on every call, counts one charge for the source and its fork together."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db")
    async with engine:
        wid = (await engine.start("timeout_unhooked_pay", workflow_id="parked")).row.id

        async def parked() -> bool:
            return (await engine.get(wid)).parked == "step_outcome_unknown"

        with processes() as procs:
            procs.append(fork_worker(cli_forks, pg_dsn, tmp_path, "a"))
            await eventually(parked, 30, "the workflow to park on the unknown charge")
            refused = await _refusal(engine.fork(wid, actor="ops", reason="try again"))
            await asyncio.sleep(2.0)  # a fork's worker would charge now
            assert _charges(service) == ["parked:charge"], "the fork charged again"
            assert isinstance(refused, StepUnresolved), refused
            assert "resolve-step parked charge" in refused.message
            forks = [w.id for w in await engine.list_workflows() if w.id.startswith("parked.")]
            assert forks == []
        # The operator finds the charge in the service and says so; then forks (no worker
        # runs meanwhile: a worker holding the resumed source would refuse the fork).
        [(charge_id, key, fence, _)] = service.charges()
        result = {"charge_id": charge_id, "key": key, "fence": fence}
        await engine.resolve_step(wid, "charge", Applied(result), actor="ops", reason="in PSP")
        fork = await engine.fork(wid, actor="ops", reason="try again")
        with processes() as procs:
            procs.append(fork_worker(cli_forks, pg_dsn, tmp_path, "b"))
            await eventually(
                lambda: _all_done(engine, [wid, fork.id]), 30, "the source and its fork"
            )
        assert _charges(service) == ["parked:charge"], "the fork charged again"
        for w in (wid, fork.id):
            row = await engine.get(w)
            assert (row.state, row.context["charge"]) == ("done", result)
            await engine.check(w)
    service.close()


@pytest.mark.acceptance
async def test_a_workflow_a_worker_holds_is_not_forked(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    """A fork while the worker is inside the charge (the call in flight) is refused: the
    fork's worker would charge under its own key."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db")
    async with engine:
        wid = (await engine.start("frozen_pay", workflow_id="in-flight")).row.id
        with processes() as procs:
            procs.append(fork_worker(cli_forks, pg_dsn, tmp_path, "a", EO_WINDOW="3"))

            async def in_step() -> bool:
                return bool(markers(tmp_path, "in_step"))

            await eventually(in_step, 20, "the worker inside the charge")
            refused = await _refusal(engine.fork(wid, actor="ops", reason="r"))
            await eventually(lambda: _all_done(engine, [wid]), 20, "the workflow")
            await asyncio.sleep(2.0)  # a fork's worker would charge now
            assert _charges(service) == ["in-flight:charge"], "the fork charged again"
            assert isinstance(refused, WorkflowBusy), refused
            assert "a worker holds workflow 'in-flight'" in refused.message
            fork = await engine.fork(wid, actor="ops", reason="a copy, once it is done")
            await asyncio.sleep(1.0)
        assert fork.terminal
        assert _charges(service) == ["in-flight:charge"]
        assert [w.id for w in await engine.list_workflows() if w.id.startswith("in-flight.")] == [
            fork.id
        ]
    service.close()


@pytest.mark.acceptance
async def test_a_tampered_archive_imported_while_a_worker_runs_charges_nothing(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    """Two paid orders are pruned into an archive; one record is edited back to a live, due
    state (log cut to its start, charge step removed), another given a lease for a hundred
    years by a worker that does not exist. Imported while a worker runs: both are refused
    before anything of them is written, the untouched one is restored, and the service, which
    charges on every call, counts no new charge."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db")
    async with engine:
        ids = ["order-1", "order-2", "order-3"]
        for wid in ids:
            await engine.start("frozen_pay", {"order": wid}, workflow_id=wid)
        with processes() as procs:
            procs.append(fork_worker(cli_forks, pg_dsn, tmp_path, "a", EO_WINDOW="0"))
            await eventually(lambda: _all_done(engine, ids), 30, "the orders to be paid")
            assert sorted(_charges(service)) == [f"{w}:charge" for w in ids]
            archive = tmp_path / "old.jsonl.gz"
            assert (await engine.prune(0, archive=archive)).workflows == 3
            with gzip.open(archive, "rt") as f:
                records = {r["id"]: r for r in (json.loads(line) for line in f)}
            live, leased, good = (records[w] for w in ids)
            live["transitions"] = live["transitions"][:1]
            live["steps"] = []
            live["workflow"].update(
                state="charging",
                terminal=False,
                version=1,
                context={"order": "order-1"},
                next_due_at=0.0,
            )
            leased["workflow"].update(
                lease_owner="worker:ghost", lease_expires_at=time.time() + 100 * 365 * 86400
            )
            tampered = tmp_path / "tampered.jsonl.gz"
            with gzip.open(tampered, "wt") as f:
                f.writelines(json.dumps(r) + "\n" for r in (live, leased, good))
            try:
                report = await engine.import_archive(tampered)
            finally:
                await asyncio.sleep(3.0)  # the worker would charge a restored live order now
                assert sorted(_charges(service)) == [f"{w}:charge" for w in ids], "charged again"
            assert [(r["id"], r["code"]) for r in report.refused] == [
                ("order-1", "invalid_input"),
                ("order-2", "invalid_input"),
            ]
            assert report.imported == ["order-3"]
        for wid in ("order-1", "order-2"):
            assert await engine.store.get_workflow(wid) is None
        await engine.check("order-3")
    service.close()


async def _refusal(call: Awaitable[object]) -> StatewrightError | None:
    """What the call raised (None: it went through)."""
    try:
        await call
    except StatewrightError as exc:
        return exc
    return None


async def _all_done(engine: Engine, ids: list[str]) -> bool:
    rows = [await engine.get(i) for i in ids]
    return all(r.terminal for r in rows)
