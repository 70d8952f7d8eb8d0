"""Webhook delivery survives SIGKILL of the process that sends it.

A real ``statewright alerts --deliver`` process delivers to a real local receiver (in this test
process) that records every request; it is killed with SIGKILL at random instants while
notifications are pending (claimed, in flight, answered but not yet marked), restarted, and
at the end:

- every notification in the outbox was delivered (none lost, none dead-lettered), and the
  receiver got every expected idempotency key: the FIRING ones written before, and the
  RESOLVED ones the deliverer's own evaluations wrote (no alert fired again after a restart);
- per idempotency key, every request carried the same body.

Delivery is at least once, so the receiver MAY get a key more than once: exactly when the
sender was killed after the receiver took a request and before the outbox row was marked
delivered (or a claim ran out mid-send). "None twice per key" therefore means: the key is
stable, so a receiver that dedupes by key (as the README tells receivers to) acts on each
notification exactly once. The test checks that deduping by key gives exactly the expected
notifications, and that duplicates happen only around kills (at most one batch per kill).

The deliverers are forked from a fork server that has imported statewright once (the
``cli_forks`` fixture: tests/cli_forks.py, on tests/forkserver.py): the same command line,
run by the CLI's own entry point, without an interpreter start-up per restart. ``--torture`` (or
``STATEWRIGHT_TORTURE=1``) kills more.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from statewright.observability.delivery import fingerprint, idempotency_key
from statewright.store import store_from_url
from statewright.store.alert_outbox import AlertChange, AlertStateRecord, OutboxRecord
from statewright.store.protocol import FullStore as Store
from tests.acceptance.crash.harness import torture_enabled
from tests.alerting.receiver import Receiver, receiver
from tests.forkserver import Child, ForkServer

T = TypeVar("T")
N = 10
"""Alerts firing when the deliverer first starts (each also gets resolved by it)."""
KILLS = 4
"""Restarts killed by default: every one lands while notifications are pending, in practice."""
TORTURE_KILLS = 40
"""With ``--torture`` (or ``STATEWRIGHT_TORTURE=1``)."""
ROUND = 10
"""Alerts recorded before each restart, so every kill finds notifications to send."""
BATCH = 10
T0 = time.time() - 3600  # the deliverer runs on the system clock


def _changes(url: str, first: int = 0, count: int = N) -> list[AlertChange]:
    out = []
    for i in range(first, first + count):
        labels = {"alertname": "running_too_long", "severity": "warning",
                  "machine": f"m{i:02d}", "state": "running"}  # fmt: skip
        fp = fingerprint(labels)
        alert = {"status": "firing", "labels": labels, "annotations": {"summary": f"s{i}"},
                 "startsAt": "2027-01-15T08:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
                 "generatorURL": "", "fingerprint": fp}  # fmt: skip
        out.append(
            AlertChange(
                fingerprint=fp,
                status="firing",
                rule="running_too_long",
                labels=labels,
                annotations={"summary": f"s{i}"},
                starts_at=T0 + i,
                alert=alert,
                idempotency_key=idempotency_key(fp, "firing", T0 + i),
            )
        )
    return out


def _run(where: str, fn: Callable[[Store], Awaitable[T]]) -> T:
    """``fn`` on a store of its own (opened and closed here, beside the deliverer)."""

    async def go() -> T:
        store = store_from_url(where)
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.fixture
def forks(cli_forks: ForkServer) -> ForkServer:
    return cli_forks


def _spawn(
    forks: ForkServer,
    where: str,
    rec: Receiver,
    log: Path,
    timeout: str = "1s",
    claim: str = "2s",
) -> Child:
    """``statewright alerts --deliver`` (forked), its output appended to ``log``."""
    argv = [
        "--db", where, "--log-level", "info", "alerts", "--deliver", "--alert-webhook",
        rec.url, "--alert-interval", "0.2s", "--alert-timeout", timeout, "--alert-claim", claim,
    ]  # fmt: skip
    return forks.popen(argv, log)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "alerts.db")
    return str(request.getfixturevalue("pg_dsn"))


def test_delivery_survives_sigkill_of_the_sender(
    where: str, tmp_path: Path, forks: ForkServer, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(os.environ.get("STATEWRIGHT_SEED", "alerts"))
    kills_planned = TORTURE_KILLS if torture_enabled(request.config) else KILLS
    total = N + kills_planned * ROUND
    log = tmp_path / "deliver.log"
    with receiver(delay=0.03) as rec:
        seeded = _changes(rec.url)

        async def seed(store: Store) -> list[AlertChange]:
            return await store.record_alert_changes(seeded, [rec.url], T0 + N)

        assert len(_run(where, seed)) == N

        async def pending(store: Store) -> int:
            rows = await store.alert_notifications()
            resolved = sum(r.status == "resolved" for r in rows)
            undelivered = sum(r.delivered_at is None for r in rows)
            return undelivered + (len(seeded) - resolved)

        kills = busy_kills = 0
        for k in range(kills_planned):
            more = _changes(rec.url, N + k * ROUND, ROUND)
            seeded += more

            async def seed_more(store: Store, more: list[AlertChange] = more) -> int:
                return len(await store.record_alert_changes(more, [rec.url], T0 + total))

            assert _run(where, seed_more) == ROUND
            sent_before = len(rec.requests)
            proc = _spawn(forks, where, rec, log)
            # Kill it while it sends: soon after the receiver got its first request (then
            # ~30 ms a request, 10 at once).
            deadline = time.monotonic() + 30
            while len(rec.requests) == sent_before:
                if proc.poll() is not None:
                    pytest.fail(
                        f"the deliverer exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                    )
                assert time.monotonic() < deadline, "the deliverer sent nothing in 30 s"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.06))
            proc.kill()
            assert proc.wait() == -signal.SIGKILL
            kills += 1
            busy_kills += bool(_run(where, pending))
        # Most kills must land while notifications are pending (else the test proves little).
        assert busy_kills >= kills_planned // 2, busy_kills

        proc = _spawn(forks, where, rec, log)
        try:
            deadline = time.monotonic() + 60
            while _run(where, pending) and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            # 0, or killed by SIGTERM when it came before the handler was installed
            code = proc.wait(timeout=20)
            assert code in (0, -signal.SIGTERM), log.read_text()[-3000:]

    async def outbox(store: Store) -> tuple[list[OutboxRecord], list[AlertStateRecord]]:
        return await store.alert_notifications(), await store.alert_states()

    rows, states = _run(where, outbox)
    assert states == []  # every alert resolved: none is recorded as firing any more
    assert len(rows) == 2 * total, [(r.status, r.fingerprint) for r in rows]
    assert all(r.delivered_at is not None and r.dead_at is None for r in rows), (
        [
            (r.status, r.attempts, r.last_error, r.next_at, r.claim)
            for r in rows
            if r.delivered_at is None
        ],
        log.read_text()[-3000:],
    )
    expected = {r.idempotency_key for r in rows}
    assert {c.idempotency_key for c in seeded} < expected  # the FIRING ones, then RESOLVED
    got = rec.keys()
    assert set(got) == expected  # none lost; deduped by key, exactly the notifications
    bodies: dict[str, object] = {}
    for r in rec.requests:
        assert bodies.setdefault(r.key, r.body) == r.body  # a resend is the same message
    statuses = [b["status"] for b in bodies.values()]  # type: ignore[index]
    assert statuses.count("firing") == total and statuses.count("resolved") == total
    resent = sum(n - 1 for n in got.values())
    assert resent <= kills * BATCH, got
    print(
        f"{kills} kills ({busy_kills} with notifications pending), {len(rec.requests)} "
        f"requests, {len(expected)} notifications, {resent} resent after a kill"
    )


def test_two_deliverers_send_each_notification_once(
    where: str, tmp_path: Path, forks: ForkServer
) -> None:
    """Two deliverer processes on one store, nobody killed: they share the outbox through
    their claims (SKIP LOCKED on PostgreSQL), so each notification is sent exactly once.

    The receiver holds every request until both hold a claim at once (the outbox shows
    claims of two deliverers), so both take part however their start-ups fall; their claims
    and timeouts are long enough for that wait (no claim may run out here)."""
    log = tmp_path / "deliver.log"
    with receiver() as rec:
        seeded = _changes(rec.url)

        async def seed(store: Store) -> list[AlertChange]:
            return await store.record_alert_changes(seeded, [rec.url], T0 + N)

        async def claimants(store: Store) -> set[str]:
            rows = await store.alert_notifications()
            return {r.claim.split(":")[0] for r in rows if r.claim and r.delivered_at is None}

        async def delivered(store: Store) -> int:
            return sum(r.delivered_at is not None for r in await store.alert_notifications())

        assert len(_run(where, seed)) == N
        rec.gate.clear()
        procs = [_spawn(forks, where, rec, log, timeout="20s", claim="60s") for _ in range(2)]
        try:
            deadline = time.monotonic() + 15
            while len(_run(where, claimants)) < 2:
                for p in procs:
                    assert p.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (rec.requests, log.read_text()[-3000:])
                time.sleep(0.02)
            rec.gate.set()
            # Once every notification is marked delivered nothing is due any more, and once
            # both have stopped (each finishes the round it is in) nothing more can arrive.
            deadline = time.monotonic() + 60
            while _run(where, delivered) < 2 * N and time.monotonic() < deadline:
                for p in procs:
                    assert p.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)
        finally:
            rec.gate.set()
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                assert p.wait(timeout=20) == 0, log.read_text()[-3000:]
    got = rec.keys()
    assert len(got) == 2 * N and set(got.values()) == {1}, got
    text = log.read_text()
    # both took part (each delivered line names its deliverer), and neither lost a claim
    owners = set(re.findall(r"action=alert_delivered .*?deliverer=(\S+)", text))
    assert len(owners) == 2, text[-3000:]
    assert "alert_claim_lost" not in text
