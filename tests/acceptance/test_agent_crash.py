"""A PydanticAI agent in a state under SIGKILL, on both stores (issue 27): every completed
model response and tool result comes from the ledger after a crash, no tool effect repeats,
and the model moves the workflow only through an event that is legal now.

Each workflow's agent (:mod:`tests.acceptance.crash.agent_worker`) makes 6 model calls and 4
tool calls; worker processes are SIGKILLed about 20 times, from inside (in a model call before
or after it answered, in a tool before or after its effect) and from outside at a random
moment. The fake model is a service: it records each response it gives under the model step's
key at the :class:`~tests.acceptance.crash.gateway.ModelGateway` as it answers, and the agent
reconciles a cut call against it (``model_reconcile``). In the end, for every workflow: it is
``submitted`` by the one legal ``request_approval`` (the refused try over the limit and the
approval event it may not fire never moved it); the service, which does not deduplicate, holds
exactly 4 effects, one per tool step key; the gateway holds exactly 6 responses, one per model
step key (a call cut after it answered was reconciled, not asked again; one cut before it
answered gave nothing and was asked again, which the test counts); every model step is done;
the conversation in the ledger shows the refusals the model got; replay equals the row.

Reproduce a run with ``STATEWRIGHT_CRASH_SEED=<seed>``; ``--torture`` kills ten times more.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from statewright import Engine, store_from_url
from tests.acceptance.crash.agent_worker import MODEL_CALLS, PATH, TOOL_CALLS, TOOLS, TYPE
from tests.acceptance.crash.agent_worker import make_type as agent_type
from tests.acceptance.crash.app import Service
from tests.acceptance.crash.gateway import ModelGateway, reconciled
from tests.acceptance.crash.harness import KILLED, crash_seed
from tests.forkserver import ForkServer
from tests.torture import torture_enabled

BATCH = 6
KILLS = 20
TORTURE_KILLS = 200
ROUND_TIMEOUT = 60.0
BUDGET = 240.0
"""Seconds the kills may take (ten times as many under ``--torture``, as the kills)."""


def _zygote(tmp: Path) -> ForkServer:
    return ForkServer(
        tmp / "zygote.err",
        "tests.acceptance.crash.agent_worker:child_main",
        preload=(
            "jsonschema",
            "pydantic_ai",
            "pydantic_ai.models.function",
            "statewright.agents.pydantic_ai",
            "statewright.definition.validate",
            "statewright.store.postgres",
            "statewright.store.sqlite",
        ),
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        name="agent zygote",
    )


def _tail(err: Path) -> str:
    return err.read_text(errors="replace")[-4000:] if err.exists() else ""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.acceptance
async def test_sigkill_never_asks_the_model_again_nor_repeats_a_tool(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url
    torture = torture_enabled(request.config)
    target = TORTURE_KILLS if torture else KILLS
    budget = BUDGET * 10 if torture else BUDGET
    seed = crash_seed()
    kind = "postgres" if url.startswith("postgres") else "sqlite"
    tag = f"[agent crash, {kind}, seed {seed}]"
    print(f"\n{tag} target={target} kills", flush=True)
    rng = random.Random(seed)
    started = time.monotonic()
    service_path, model_log = tmp_path / "service.db", tmp_path / "model.log"
    kill_log = tmp_path / "kills.log"
    service = Service(service_path, mode="count")
    gateway_path = tmp_path / "gateway.db"
    gateway = ModelGateway(gateway_path)
    engine = Engine(
        store_from_url(url), [agent_type(service, model_log, lambda point: None, rng, gateway)]
    )
    ids: list[str] = []

    async def start(n: int) -> None:
        for _ in range(n):
            wid = f"refund-{len(ids):04d}"
            await engine.start(TYPE, {"limit": 500}, workflow_id=wid)
            ids.append(wid)

    async def unfinished() -> int:
        rows = [await engine.get(wid) for wid in ids]
        return sum(1 for r in rows if not r.terminal)

    async with engine:
        await start(BATCH)
        outside = rounds = forked = 0
        with _zygote(tmp_path) as zygote:

            def fork(die: float, concurrency: int) -> tuple[int, Path, Path]:
                nonlocal forked
                n, forked = forked, forked + 1
                ready, err = tmp_path / f"ready-{n}", tmp_path / f"worker-{n}.err"
                argv = [
                    *("--db", url, "--service", str(service_path)),
                    *("--model-log", str(model_log), "--ready", str(ready)),
                    *("--gateway", str(gateway_path)),
                    *("--kill-log", str(kill_log), "--die", str(die)),
                    *("--seed", str(seed * 10_000 + n), "--concurrency", str(concurrency)),
                ]
                return zygote.spawn(argv, tmp_path / f"worker-{n}.out", err), ready, err

            def ready_or_dead(pid: int, ready: Path) -> bool:
                until = time.monotonic() + 30
                while not ready.exists():
                    if zygote.status([pid])[pid] is not None:
                        return False
                    assert time.monotonic() < until, f"{tag} worker {pid} never became ready"
                    time.sleep(0.002)
                return True

            while len(_lines(kill_log)) + outside < target:
                assert time.monotonic() - started < budget, f"{tag} out of time"
                if await unfinished() == 0:
                    await start(BATCH)
                external = rounds % 2 == 1
                rounds += 1
                pid, ready, err = fork(0.0 if external else 0.04, rng.choice([1, 4, 8]))
                code: int | None
                if external and ready_or_dead(pid, ready):
                    await asyncio.sleep(rng.uniform(0.02, 0.3))
                    code, was_running = zygote.kill(pid)
                    outside += was_running
                else:
                    code = await asyncio.to_thread(zygote.wait, pid, ROUND_TIMEOUT)
                assert code in (0, KILLED), f"{tag} worker {pid} ended with {code}{_tail(err)}"
            pid, _, err = fork(0.0, 8)
            code = await asyncio.to_thread(zygote.wait, pid, ROUND_TIMEOUT * 2)
            assert code == 0, f"{tag} the final run ended with {code}{_tail(err)}"
        inside = Counter(line.split()[0] for line in _lines(kill_log))
        assert sum(inside.values()) >= 1 and outside >= 1, f"{tag} {inside}, outside {outside}"

        asked = Counter(tuple(line.split()) for line in _lines(model_log))
        per_key = Counter(e["key"] for e in service.effects())
        answers = gateway.responses()
        assert not service.refusals()
        reasked = 0
        expected: set[str] = set()
        for wid in ids:
            row = await engine.get(wid)
            assert (row.state, row.parked) == ("submitted", None), f"{tag} {wid}: {row}"
            history = await engine.history(wid)
            assert [t.to_state for t in history] == list(PATH), f"{tag} {wid}: {history}"
            assert history[-1].event == "request_approval"
            assert history[-1].payload == {"amount": 50}, f"{tag} {wid}: {history[-1]}"
            steps = {s.step: s for s in await engine.store.steps(wid)}
            v = history[0].version
            models = [f"agent.v{v}.model.{n}" for n in range(MODEL_CALLS)]
            tools = [s for s in steps if ".tool." in s]
            assert sorted(steps) == sorted([*models, *tools]), f"{tag} {wid}: {sorted(steps)}"
            assert sorted(s.rsplit(".", 1)[1] for s in tools) == sorted(TOOLS), f"{tag} {tools}"
            assert all(s.status == "done" for s in steps.values()), f"{tag} {steps}"
            # Exactly one effect per tool step, though the service does not deduplicate.
            mine = {k: n for k, n in per_key.items() if k.startswith(f"{wid}:")}
            assert mine == {f"{wid}:{s}": 1 for s in tools}, f"{tag} {wid} effects {mine}"
            assert len(mine) == TOOL_CALLS
            expected.update(mine)
            # Exactly one response given per model step: none was asked again once answered.
            given = {k: n for k, n in answers.items() if k.startswith(f"{wid}:")}
            assert given == {f"{wid}:{s}": 1 for s in models}, f"{tag} {wid} responses {given}"
            for n, name in enumerate(models):
                calls = asked[wid, str(n)]
                attempts = steps[name].attempts
                # Each extra call is a begun attempt a kill cut before the model answered.
                assert 1 <= calls <= attempts, f"{tag} {wid} {name}: {calls} calls, {attempts}"
                reasked += calls - 1
            assert asked[wid, str(MODEL_CALLS)] == 0, f"{tag} {wid}: asked past the event"
            # The conversation kept with the steps shows the refusals the model was given.
            said = [m for s in models for m in steps[s].result["messages"]]
            tool_said = " ".join(m["content"] for m in said if m["role"] == "tool")
            assert "illegal_transition" in tool_said, f"{tag} {wid}: {said}"
            assert "Unknown tool name: 'approve'" in tool_said, f"{tag} {wid}: {said}"
            got = await engine.check(wid)  # replay equals the row
            assert (got.state, got.version) == (row.state, row.version)
        assert set(per_key) == expected, f"{tag} stray effects {set(per_key) - expected}"
        assert sum(answers.values()) == MODEL_CALLS * len(ids), f"{tag} {answers}"
        total = sum(asked.values())
        assert total == MODEL_CALLS * len(ids) + reasked
    service.close()
    gateway.close()
    found = reconciled(Path(f"{gateway_path}.journal"))
    assert reasked + found >= 1, f"{tag} no kill landed inside a model call"
    print(
        f"{tag} {sum(inside.values())} SIGKILLs inside ({dict(inside)}), {outside} from "
        f"outside, {len(ids)} workflows: {len(per_key)} tool effects (one each), "
        f"{sum(answers.values())} model responses (= {MODEL_CALLS} x {len(ids)}), {found} "
        f"reconciled from the gateway; {total} calls asked = {MODEL_CALLS} x {len(ids)} + "
        f"{reasked} cut before they answered, {time.monotonic() - started:.1f}s"
    )
