"""Import does not trust the archive (issue 22, item 5), on every store: each tampered record
is refused whole before anything of it is written, listed with its line and why, and the rest
of the archive still imports. A finished order edited back to a live, due state (its charge
step removed), a log that does not replay to its row, a rewritten tenant, a lease held for a
hundred years, a line that inflates to 150 MB, a line nested 5,000 deep."""

from __future__ import annotations

import copy
import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

from statewright import Engine, ManualClock, Next, Worker, WorkflowType
from statewright.store.protocol import FullStore as Store
from tests.store.contract.retention.test_retention import DAY, machine

YEAR = 365 * DAY


class Gateway:
    """Counts every charge: it does not deduplicate by key."""

    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, key: str) -> dict[str, str]:
        self.charges.append(str(key))
        return {"charge_id": f"ch-{len(self.charges)}"}


def engine_on(store: Store, gateway: Gateway) -> Engine:
    async def run(run: Any) -> Next:
        result = await run.step("charge", gateway.charge)
        return Next("finish", context={"receipt": result["charge_id"]})

    return Engine(store, [WorkflowType(machine(), handlers={"running": run})], clock=ManualClock())


async def archived(
    engine: Engine, tmp_path: Path, *ids: str, tenant: str = "default"
) -> list[Any]:
    """The archive records of finished workflows ``ids`` (charged once each), pruned."""
    for wid in ids:
        await engine.start("job", {"n": wid}, workflow_id=wid, tenant=tenant)
        await engine.send(wid, "go")
    await Worker(engine).run_until_idle()
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    path = tmp_path / "pruned.jsonl.gz"
    path.unlink(missing_ok=True)
    await engine.prune(DAY, archive=path)
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def write(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "tampered.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


async def refused_alone(engine: Engine, path: Path, wid: str, code: str, good: str) -> str:
    """Imports ``path``: its first record (``wid``) refused with ``code`` and nothing of it
    written, the good one after it imported (or found imported already). Returns the
    refusal's message."""
    report = await engine.import_archive(path)
    assert [(r["line"], r["code"]) for r in report.refused] == [(1, code)], report.refused
    assert [*report.imported, *report.identical] == [good]
    assert await engine.store.get_workflow(wid) is None
    assert await engine.store.history(wid) == [] and await engine.store.steps(wid) == []
    await engine.check(good)
    message: str = report.refused[0]["message"]
    return message


async def test_a_finished_order_edited_back_to_live_and_due_is_refused(
    store: Store, tmp_path: Path
) -> None:
    gateway = Gateway()
    engine = engine_on(store, gateway)
    rec, good = await archived(engine, tmp_path, "o1", "o2")
    assert sorted(gateway.charges) == ["o1:charge", "o2:charge"]
    live = copy.deepcopy(rec)
    wf = live["workflow"]
    live["transitions"] = live["transitions"][:2]  # $start, go: the log cut to match
    live["steps"] = []  # the charge step removed
    wf.update(
        state="running",
        terminal=False,
        version=2,
        context={"n": "o1"},
        next_due_at=engine.clock.now(),
    )
    message = await refused_alone(engine, write(tmp_path, live, good), "o1", "invalid_input", "o2")
    assert "not finished" in message
    # The same with the row's flag still saying finished: its state is not a terminal one.
    wf.update(terminal=True, next_due_at=None)
    message = await refused_alone(
        engine, write(tmp_path, live, good), "o1", "replay_mismatch", "o2"
    )
    assert "'running' is not a terminal state" in message
    await Worker(engine).run_until_idle()
    assert sorted(gateway.charges) == ["o1:charge", "o2:charge"]  # nothing charged again


async def test_a_log_that_does_not_replay_to_its_row_is_refused_before_it_is_written(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store, Gateway())
    rec, good = await archived(engine, tmp_path, "r1", "r2")
    rec["workflow"]["context"]["receipt"] = "ch-999"  # the row edited, not its log
    message = await refused_alone(
        engine, write(tmp_path, rec, good), "r1", "replay_mismatch", "r2"
    )
    assert "replay gives" in message
    rec = (await archived(engine, tmp_path, "r3"))[0]
    rec["transitions"][1]["version"] = 7  # a gap
    good2 = (await archived(engine, tmp_path, "r4"))[0]
    await refused_alone(engine, write(tmp_path, rec, good2), "r3", "replay_mismatch", "r4")


async def test_a_rewritten_tenant_is_refused(store: Store, tmp_path: Path) -> None:
    engine = engine_on(store, Gateway())
    rec, good = await archived(engine, tmp_path, "acme:t1", "acme:t2", tenant="acme")
    rec["workflow"]["tenant"] = "globex"
    message = await refused_alone(
        engine, write(tmp_path, rec, good), "acme:t1", "invalid_input", "acme:t2"
    )
    assert "qualified by tenant 'acme'" in message
    rec["workflow"]["tenant"] = "acme"
    rec["rejections"] = [
        {
            "workflow_id": "acme:t1",
            "type": "job",
            "tenant": "globex",
            "state": "queued",
            "event": "finish",
            "code": "illegal_transition",
            "actor": "x",
            "message": "m",
            "at": 1.0,
        }
    ]
    message = await refused_alone(
        engine, write(tmp_path, rec, good), "acme:t1", "invalid_input", "acme:t2"
    )
    assert "another tenant" in message


async def test_a_lease_held_for_a_hundred_years_is_refused(store: Store, tmp_path: Path) -> None:
    engine = engine_on(store, Gateway())
    rec, good = await archived(engine, tmp_path, "l1", "l2")
    rec["workflow"].update(
        lease_owner="fake-worker", lease_expires_at=engine.clock.now() + 100 * YEAR, fence=99
    )
    message = await refused_alone(engine, write(tmp_path, rec, good), "l1", "invalid_input", "l2")
    assert "leased" in message
    rec["workflow"].update(lease_owner=None, lease_expires_at=None)
    rec["timers"] = [
        {
            "workflow_id": "l1",
            "due_at": 1.0,
            "event": "go",
            "payload": {},
            "key": "go",
            "every": None,
            "keep": True,
        }
    ]
    await refused_alone(engine, write(tmp_path, rec, good), "l1", "invalid_input", "l2")


async def test_a_gzip_bomb_is_refused_without_being_inflated_whole(
    store: Store, tmp_path: Path
) -> None:
    """A line that inflates to 80 MiB (a few hundred KB of gzip) is skipped a chunk at a time:
    the import's own allocations stay far below it. A context over the engine's limits (but
    under the line's) is refused by the limits. (It was 150 MB: 80 MiB is five times the
    line's bound and twice the peak allowed, so an import that inflated the line whole still
    fails the peak bound, in half the time.)"""
    engine = engine_on(store, Gateway())
    rec, good = await archived(engine, tmp_path, "b1", "b2")
    head, tail = json.dumps(rec).split('"n": "b1"', 1)
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(head + '"n": "')
        chunk = "a" * (1 << 20)
        for _ in range(80):
            f.write(chunk)
        f.write('"' + tail + "\n" + json.dumps(good) + "\n")
    assert path.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        report = await engine.import_archive(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(r["line"], r["code"]) for r in report.refused] == [(1, "invalid_input")]
    assert "longer than 16777216 bytes" in report.refused[0]["message"]
    assert report.imported == ["b2"]
    assert peak < 40 * 2**20, f"the import allocated {peak / 2**20:.0f} MiB at its peak"
    big = copy.deepcopy(rec)
    big["workflow"]["context"]["n"] = "a" * 300_000  # under the line's bound, over max_bytes
    await refused_alone(engine, write(tmp_path, big, good), "b1", "value_too_large", "b2")


async def test_a_line_nested_5000_deep_is_refused_with_a_typed_error(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store, Gateway())
    rec, good = await archived(engine, tmp_path, "d1", "d2")
    deep = "[" * 5000 + "]" * 5000
    line = json.dumps(rec).replace('"n": "d1"', f'"n": {deep}', 1)
    await refused_alone(engine, write(tmp_path, line, good), "d1", "value_too_deep", "d2")
    line = json.dumps(rec).replace('"state": "done"', f'"state": {deep}', 1)  # not JSON's place
    await refused_alone(engine, write(tmp_path, line, good), "d1", "invalid_input", "d2")
