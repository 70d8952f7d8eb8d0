"""Three worker processes share one PostgreSQL: one is SIGKILLed, one SIGTERMed mid-run.

Every workflow still finishes, each idempotency key's effect happens once, no transition is
lost or doubled, and the dead worker's work is taken over within the lease time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from statewright import Engine, WorkflowFilter, store_from_url
from tests.acceptance.crash.app import PATH, STAGES, STEPS, TYPE, Service, make_type

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = 300
LEASE = 3.0


def _spawn(dsn: str, tmp: Path, name: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.acceptance.crash.worker",
            "--db",
            dsn,
            "--service",
            str(tmp / "service.db"),
            "--ready",
            str(tmp / f"{name}.ready"),
            "--kill-log",
            str(tmp / "kills.log"),
            "--concurrency",
            "8",
            "--lease-seconds",
            str(LEASE),
            "--stall-seconds",
            "30",
            "--jitter",
            "0.004",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _transitions(engine: Engine) -> int:
    return len(await engine.store.transitions_since(0, limit=100_000))


async def _wait_for(engine: Engine, count: int, procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 90
    while await _transitions(engine) < count:
        for p in procs:
            if p.poll() not in (None, 0):
                pytest.fail(f"worker exited {p.returncode}: {p.stderr.read() if p.stderr else ''}")
        assert time.monotonic() < deadline, "the workers made no progress"
        await asyncio.sleep(0.05)


@pytest.mark.acceptance
async def test_three_workers_one_killed_one_terminated(pg_dsn: str, tmp_path: Path) -> None:
    service = Service(tmp_path / "service.db")
    engine = Engine(store_from_url(pg_dsn), [make_type(service)])
    async with engine:
        for i in range(WORKFLOWS):
            await engine.start(TYPE, {"n": i}, workflow_id=f"wf-{i:03d}")
        procs = {name: _spawn(pg_dsn, tmp_path, name) for name in ("a", "b", "c")}
        try:
            total = WORKFLOWS * len(PATH)
            await _wait_for(engine, WORKFLOWS + total // 5, list(procs.values()))

            # SIGKILL worker a: whatever it held is orphaned until recovery takes it over.
            victim = procs["a"]
            owner_prefix = f":{victim.pid}:"
            held = [
                r
                for r in await engine.store.list_workflows(WorkflowFilter(limit=10_000))
                if r.lease_owner and owner_prefix in r.lease_owner
            ]
            assert held, "worker a held no leases when killed: the takeover check would be vacuous"
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            assert victim.wait(timeout=10) == -signal.SIGKILL

            # SIGTERM worker b: it finishes its in-flight handlers, hands back its leases.
            await _wait_for(engine, WORKFLOWS + total // 2, [procs["b"], procs["c"]])
            polite = procs["b"]
            polite.send_signal(signal.SIGTERM)
            out, err = polite.communicate(timeout=60)
            assert polite.returncode == 0, err
            assert json.loads(out.strip().splitlines()[-1])["stopped"] is True
            assert not [o for o in await engine.store.lease_owners() if f":{polite.pid}:" in o]

            # The orphans were taken over within the lease time (plus a poll's slack).
            for row in held:
                deadline = killed_at + LEASE * 2 + 5
                while (await engine.get(row.id)).version == row.version and not (
                    await engine.get(row.id)
                ).terminal:
                    assert time.monotonic() < deadline, f"{row.id} orphaned past the lease"
                    await asyncio.sleep(0.05)

            out, err = procs["c"].communicate(timeout=120)
            assert procs["c"].returncode == 0, err
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
                for pipe in (p.stdout, p.stderr):
                    if pipe is not None:
                        pipe.close()

        rows = await engine.store.list_workflows(WorkflowFilter(limit=10_000))
        assert len(rows) == WORKFLOWS
        assert {r.state for r in rows} == {"done"}
        for r in rows:
            history = await engine.history(r.id)
            assert [t.version for t in history] == list(range(1, len(PATH) + 1)), r.id
            assert [t.to_state for t in history] == list(PATH), r.id
            assert [t.event for t in history] == ["$start", *(e for _, _, e in STAGES)]
            await engine.check(r.id)
            assert r.lease_owner is None
        keys = Counter(e["key"] for e in service.effects())
        assert not [k for k, n in keys.items() if n > 1], "an effect was applied twice"
        assert set(keys) == {f"wf-{i:03d}:{s}" for i in range(WORKFLOWS) for s in STEPS}
    service.close()
