"""An OpenAI Agents SDK agent SIGKILLed at random moments loses nothing and repeats nothing, on
both stores: real worker processes (forked by a zygote), killed from outside 20 times, two
kills in three aimed at a moment a model call or a tool's service call is in flight.

Each workflow's agent makes 6 model calls and 4 tool calls (tests/acceptance/crash/oai_agent.py)
against a service that does not deduplicate. After a final clean run:

- every workflow ended in ``requested``, by ``request_approval``: never by ``approve``, the
  approval event the model tried (and was told does not exist), nor by the payload it tried
  that the event's schema refuses (a structured refusal, which the model read and went on);
- tool effects at the service: exactly 4 per workflow, one per tool step key;
- model responses: exactly 6 per workflow, one per model step key. The model answers through
  a gateway that records each response it gives by the step's key, and the agent reconciles a
  cut call against it (``model_reconcile``): a call killed after it answered is not asked
  again; one killed before it answered gave nothing and is asked again (the test reports how
  many of each);
- every model step is done, and the model was asked for it at most as often as the ledger
  counts attempts at it.

``STATEWRIGHT_CRASH_SEED=<seed>`` reproduces a run; ``--torture`` makes it 200 kills.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from statewright import Engine, WorkflowType, store_from_url
from statewright.types import WorkflowFilter
from tests.acceptance.crash.app import Faults, InFlight, Service
from tests.acceptance.crash.gateway import ModelGateway, reconciled
from tests.acceptance.crash.harness import (
    Child,
    Files,
    Tally,
    crash_seed,
    kill_from_outside,
    settle,
    store_kind,
    torture_enabled,
    worker_argv,
)
from tests.acceptance.crash.oai_agent import (
    CHARGES,
    ILLEGAL,
    MODEL_CALLS,
    TYPE,
    AgentZygote,
    make_type,
)

BATCH = 8
KILLS = 20
TORTURE_KILLS = 200
ROUND_TIMEOUT = 30.0
BUDGET = 120.0


def _types(service: Service, model_log: Path) -> list[WorkflowType]:
    return [make_type(service, Faults(), model_log)]


async def _start(db: str, service: Service, model_log: Path, first: int, n: int) -> list[str]:
    ids = [f"refund-{i:04d}" for i in range(first, first + n)]
    async with Engine(store_from_url(db), _types(service, model_log)) as engine:
        for wid in ids:
            await engine.start(TYPE, {}, workflow_id=wid)
    return ids


async def _unfinished(db: str, service: Service, model_log: Path) -> int:
    async with Engine(store_from_url(db), _types(service, model_log)) as engine:
        left = await engine.store.list_workflows(WorkflowFilter(terminal=False, limit=100_000))
        return len(left)


@pytest.mark.acceptance
async def test_a_killed_agent_asks_nothing_twice_and_repeats_no_tool(
    tmp_path: Path, store_url: str, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    backend = store_kind(store_url)
    target = TORTURE_KILLS if torture else KILLS
    seed = crash_seed()
    print(f"\nagent crash test [{backend}] seed={seed} target={target} kills", flush=True)
    rng = random.Random(seed)
    files = Files(tmp_path)
    model_log = tmp_path / "model.log"
    gateway_path = tmp_path / "gateway.db"
    db = store_url
    started = time.monotonic()
    deadline = started + (BUDGET * 10 if torture else BUDGET)
    service = Service(files.service, mode="count")
    ids = await _start(db, service, model_log, 0, BATCH)
    inflight = InFlight(files.inflight(0), create=True)
    tally = Tally()
    children: list[Child] = []

    def fail(message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {seed}] {message}{tail}", pytrace=False)

    with AgentZygote(tmp_path / "zygote.err") as zygote:

        def fork() -> Child:
            n = len(children)
            ready, err = tmp_path / f"ready-{n}", tmp_path / f"worker-{n}.err"
            argv = worker_argv(
                files,
                db,
                mode="count",
                ready=ready,
                plan="",
                seed=seed * 10_000 + n,
                concurrency=rng.choice([1, 2, 4, 8]),
                slot=0,
            )
            argv += ["--model-log", str(model_log), "--gateway", str(gateway_path)]
            pid = zygote.spawn(argv, tmp_path / f"worker-{n}.out", err)
            children.append(Child(n, 0, pid, "", ready, err))
            return children[-1]

        rounds = 0
        while tally.total < target:
            if time.monotonic() > deadline:
                fail(f"only {tally.total} kills within the time budget")
            if await _unfinished(db, service, model_log) == 0:
                ids += await _start(db, service, model_log, len(ids), BATCH)
            child = fork()
            # Two kills in three aimed at a call in flight, the third at any moment.
            aimed = rounds % 3 != 2
            kill_from_outside(
                zygote, child, inflight, rng, spread=0.1 if aimed else 0.4, aim_for=0.5 * aimed
            )
            if child.code is None:
                child.code = zygote.wait(child.pid, ROUND_TIMEOUT)
                if child.code is None:
                    zygote.kill(child.pid)
                    fail(f"round {rounds} hung", child)
            settle(child, files.kill_log, tally, seed)
            rounds += 1

        final = fork()
        final.code = zygote.wait(final.pid, ROUND_TIMEOUT * 2)
        if final.code != 0:
            fail(f"the final run without faults ended with {final.code}", final)
    inflight.close()
    assert tally.external_in_flight >= 1, f"[seed {seed}] no kill landed while calls were out"

    # -- verify --------------------------------------------------------------------------------
    asked: Counter[tuple[str, int]] = Counter()
    for line in model_log.read_text().splitlines():
        wid, number, _pid = line.split()
        asked[(wid, int(number))] += 1
    effects = Counter(e["key"] for e in service.effects())
    gateway = ModelGateway(gateway_path)
    answers = gateway.responses()
    gateway.close()
    found = reconciled(Path(f"{gateway_path}.journal"))
    reasked = reran_tools = 0
    try:
        async with Engine(store_from_url(db), _types(service, model_log)) as engine:
            for wid in ids:
                row = await engine.get(wid)
                assert (row.state, row.parked) == ("requested", None), (
                    f"[seed {seed}] {wid}: {row.state} parked={row.parked} {row.last_error}"
                )
                events = [t.event for t in await engine.history(wid)]
                assert "approve" not in events and events.count("request_approval") == 1, (
                    f"[seed {seed}] {wid}: {events}"
                )
                steps = {s.step: s for s in await engine.store.steps(wid)}
                models = {n: s for n, s in steps.items() if ".model." in n}
                tools = {n: s for n, s in steps.items() if ".tool." in n}
                assert len(models) == MODEL_CALLS and len(tools) == len(CHARGES), (
                    f"[seed {seed}] {wid}: {sorted(steps)}"
                )
                assert all(s.status == "done" for s in steps.values()), f"[seed {seed}] {wid}"
                # The two illegal tries came back to the model as refusals (its next step's
                # new messages), and it went on.
                [after] = [s for n, s in models.items() if n.endswith(f".model.{ILLEGAL + 1}")]
                told = {m.get("tool_call_id"): m["content"] for m in after.result["messages"]}
                assert "not found" in told[f"call_{ILLEGAL}"], f"[seed {seed}] {wid}: {told}"
                assert '"invalid_payload"' in told[f"call_{ILLEGAL}_b"], f"[seed {seed}] {told}"
                given = {k: n for k, n in answers.items() if k.startswith(f"{wid}:")}
                assert given == {f"{wid}:{m}": 1 for m in models}, f"[seed {seed}] {given}"
                for name, step in models.items():
                    n = int(name.split(".")[3])
                    calls = asked[(wid, n)]
                    assert 1 <= calls <= step.attempts, (
                        f"[seed {seed}] {wid} model call {n}: asked {calls} times, "
                        f"{step.attempts} attempts in the ledger"
                    )
                    reasked += calls - 1
                for name, step in tools.items():
                    key = f"{wid}:{name}"
                    assert effects[key] == 1, f"[seed {seed}] {key}: {effects[key]} effects"
                    assert step.result["key"] == key
                    reran_tools += step.attempts - 1
                assert sum(1 for k in effects if k.startswith(f"{wid}:")) == len(CHARGES)
    finally:
        service.close()
    assert sum(effects.values()) == len(CHARGES) * len(ids)
    assert sum(asked.values()) == MODEL_CALLS * len(ids) + reasked
    assert sum(answers.values()) == MODEL_CALLS * len(ids), f"[seed {seed}] {answers}"
    assert reasked + found >= 1, f"[seed {seed}] no kill landed inside a model call"
    print(
        f"agent crash test [{backend}] seed={seed}: {len(ids)} workflows, {tally.total} kills "
        f"({tally.external_in_flight} aimed in flight), {rounds} rounds; "
        f"{sum(answers.values())} model responses for {MODEL_CALLS * len(ids)} steps, "
        f"{found} reconciled from the gateway (cut after they answered); "
        f"{sum(asked.values())} model calls asked "
        f"({reasked} asked again after a kill cut them before they answered), "
        f"{sum(effects.values())} tool effects, {reran_tools} tool steps reconciled or rerun; "
        f"{time.monotonic() - started:.1f}s"
    )
