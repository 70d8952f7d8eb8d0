"""Transition webhooks and a Python consumer with real processes, SIGKILL and a flaky
receiver: none lost, in order per workflow, duplicates only under the same key.

Workflows run in this test process (a worker: each order's handler emits messages) while:

- two real delivering processes (``AlertDelivery``: the pump and the outbox deliverer alerts
  use), pumping and claiming concurrently, are killed with SIGKILL again and again (in turn)
  and restarted;
- the webhook receiver, a real HTTP server process, answers 503 to a share of the requests,
  is slow on another share, and is itself killed and restarted once (connection refused
  meanwhile);
- a Python consumer process (``Consumer``, durable cursor, acknowledged per batch) is killed
  and restarted.

Afterwards: every log entry of the subscribed type was delivered (answered 2xx) to the
webhook and handed to the consumer; per workflow, the first delivery of each entry came in
version order; a key seen twice always carried the same body (so a receiver deduping by
``Idempotency-Key`` acts once on each). ``--torture`` kills more.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, Worker
from statewright.store import store_from_url
from statewright.store.subscriptions import Subscription, SubscriptionFilter
from tests.subscriptions.conftest import order_type
from tests.torture import torture_enabled

ROOT = Path(__file__).resolve().parents[3]
ORDERS = 30
KILLS = 4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """One role of :mod:`.procs`, started again after each kill."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.p: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = open(self.log, "ab")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "tests.acceptance.subscriptions.procs", *self.args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()

    def kill(self, *, count: bool = True) -> None:
        if self.p is not None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()
            self.kills += count
            self.p = None

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a kill
    return out


def _in_order(firsts: list[tuple[str, int]]) -> None:
    seen: dict[str, list[int]] = defaultdict(list)
    for wf, version in firsts:
        seen[wf].append(version)
    for wf, versions in seen.items():
        assert versions == sorted(versions), f"{wf}: delivered out of order {versions}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'subs.db'}"
    return str(request.getfixturevalue("pg_dsn"))


async def test_webhook_and_consumer_survive_sigkill(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(int(os.environ.get("STATEWRIGHT_CRASH_SEED", "0")) or None)
    kills = KILLS * (10 if torture_enabled(request.config) else 1)
    port = _port()
    hook_log, consumer_log = tmp_path / "hook.jsonl", tmp_path / "consumer.jsonl"
    engine = Engine(store_from_url(store_url), [order_type()])
    async with engine:
        store = engine.store
        f = SubscriptionFilter(types=("shop_order",))
        url = f"http://127.0.0.1:{port}/hook"
        await store.put_subscription(Subscription("hook", f, url=url), time.time(), cursor=0)
        await store.put_subscription(Subscription("feed", f, consumer=True), time.time(), cursor=0)
        receiver = Proc(["receive", str(port), str(hook_log), "0.2", "0.1"], tmp_path / "r.out")
        deliverer = Proc(["deliver", store_url], tmp_path / "d.out")
        second = Proc(["deliver", store_url], tmp_path / "d2.out")
        consumer = Proc(["consume", store_url, "feed", str(consumer_log)], tmp_path / "c.out")
        procs = (receiver, deliverer, second, consumer)
        for p in procs:
            p.start()
        try:
            worker = Worker(engine)
            for i in range(ORDERS):
                wid = f"order-{i:03d}"
                await engine.start("shop_order", {"items": i}, workflow_id=wid)
                await engine.send(wid, "fail" if i % 7 == 3 else "pack")
                if i % 3 == 2:
                    await worker.run_until_idle()
                    await asyncio.sleep(rng.uniform(0.1, 0.4))
                if i % max(1, ORDERS // kills) == 0 and i:
                    victim = deliverer if (i // max(1, ORDERS // kills)) % 2 else second
                    victim.kill()
                    victim.start()
                if i == ORDERS // 2:
                    receiver.kill()  # refused for a while: retried
                    await asyncio.sleep(0.5)
                    receiver.start()
                if i in (ORDERS // 3, 2 * ORDERS // 3):
                    consumer.kill()
                    consumer.start()
            await worker.run_until_idle()
            expected = {
                (t.workflow_id, t.version)
                for i in range(ORDERS)
                for t in await engine.history(f"order-{i:03d}")
            }
            # Kill the deliverer once more while the tail is in flight, then let it finish.
            await asyncio.sleep(0.3)
            deliverer.kill()
            deliverer.start()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                hooked = {
                    (r["body"]["workflow_id"], r["body"]["version"])
                    for r in _lines(hook_log)
                    if r["status"] == 200
                }
                fed = {(r["wf"], r["v"]) for r in _lines(consumer_log)}
                if expected <= hooked and expected <= fed and not await store.outbox_pending():
                    break
                for p in procs:
                    assert p.alive(), f"{p.args[0]} died: {p.log.read_text()[-2000:]}"
                await asyncio.sleep(0.3)
        finally:
            for p in procs:
                p.kill(count=False)
        hook, fed_lines = _lines(hook_log), _lines(consumer_log)
        ok = [r for r in hook if r["status"] == 200]
        got = {(r["body"]["workflow_id"], r["body"]["version"]) for r in ok}
        assert expected <= got, f"webhook lost {sorted(expected - got)[:10]}"
        assert {(r["wf"], r["v"]) for r in fed_lines} >= expected, "consumer lost entries"
        # One body per key (a duplicate is the same notification), keys as documented.
        bodies: dict[str, Any] = {}
        for r in hook:
            assert bodies.setdefault(r["key"], r["body"]) == r["body"]
            b = r["body"]
            assert r["key"] == f"hook:{b['workflow_id']}:{b['version']}"
        # In order per workflow: the first successful delivery of each entry.
        firsts, done = [], set()
        for r in ok:
            if r["key"] not in done:
                done.add(r["key"])
                firsts.append((r["body"]["workflow_id"], r["body"]["version"]))
        _in_order(firsts)
        cfirsts, cdone = [], set()
        for r in fed_lines:
            if r["key"] not in cdone:
                cdone.add(r["key"])
                cfirsts.append((r["wf"], r["v"]))
        _in_order(cfirsts)
        # The failures really happened, and the messages travelled with their transitions.
        assert any(r["status"] == 503 for r in hook)
        shipped = [r["body"] for r in ok if r["body"]["to_state"] == "shipped"]
        assert shipped and all(b["messages"][0]["topic"] == "order.packed" for b in shipped)
        assert deliverer.kills + second.kills >= KILLS
        assert consumer.kills >= 2 and receiver.kills >= 1
        assert await store.outbox_pending() == {}
