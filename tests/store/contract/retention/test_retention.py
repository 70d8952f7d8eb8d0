"""Retention on every store (issue 14, item 4): prune deletes finished workflows whole through
the one sanctioned delete of the log, the append-only triggers still refuse any other delete or
update, an archive written before the delete imports back to rows whose replay matches."""

from __future__ import annotations

import asyncio
import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statewright import (
    Engine,
    IllegalTransition,
    InvalidInput,
    Machine,
    MachineBuilder,
    ManualClock,
    Next,
    Worker,
    WorkflowNotFound,
    WorkflowType,
)
from statewright.engine import retention
from statewright.engine.retention import parse_duration, read_archive
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

DAY = 86400.0


def machine() -> Machine:
    return (
        MachineBuilder("job")
        .state("queued", initial=True)
        .state("running")
        .state("done", terminal=True)
        .event("go")
        .event("finish")
        .transition("go", "queued", "running")
        .transition("finish", "running", "done")
        .build()
    )


def engine_on(store: Store) -> Engine:
    async def run(run: Any) -> Next:
        result = await run.step("charge", lambda key: {"charged": key})
        return Next("finish", context={"receipt": result["charged"]})

    return Engine(store, [WorkflowType(machine(), handlers={"running": run})], clock=ManualClock())


async def finished(engine: Engine, wid: str, tenant: str = "default") -> None:
    """A workflow with a log, a step, an input and a refused event, finished at the clock's
    now."""
    await engine.start("job", {"n": wid}, workflow_id=wid, tenant=tenant)
    await engine.post_input(wid, "note", {"text": "hi"})
    with pytest.raises(IllegalTransition):
        await engine.send(wid, "finish")  # refused in queued: a rejection row
    await engine.send(wid, "go")
    await Worker(engine).run_until_idle()
    assert (await engine.get(wid)).state == "done"


async def raw(store: Store, statement: str) -> None:
    """One statement on the store's database, outside the store (an operator's psql)."""
    if isinstance(store, SQLiteStore):
        await store.conn.write(lambda c: c.execute(statement))
    else:
        assert isinstance(store, PostgresStore)
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute(statement)


async def test_plain_delete_update_truncate_of_the_log_are_still_refused(store: Store) -> None:
    engine = engine_on(store)
    await finished(engine, "f1")
    await engine.start("job", {}, workflow_id="live")
    for statement in (
        "DELETE FROM transitions",
        "DELETE FROM transitions WHERE workflow_id = 'f1'",
        "UPDATE transitions SET actor = 'x' WHERE workflow_id = 'f1'",
        "UPDATE transitions SET actor = 'x' WHERE workflow_id = 'live'",
    ):
        with pytest.raises(Exception, match="append-only"):
            await raw(store, statement)
    if isinstance(store, PostgresStore):
        with pytest.raises(Exception, match="append-only"):
            await raw(store, "TRUNCATE transitions")
    assert len(await engine.history("f1")) == 3
    assert len(await engine.history("live")) == 1


async def test_even_the_sanctioned_path_refuses_the_log_of_a_live_workflow(store: Store) -> None:
    engine = engine_on(store)
    await engine.start("job", {}, workflow_id="live")
    if isinstance(store, SQLiteStore):

        def fn(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO prune_tokens (token) VALUES ('t')")
            c.execute("DELETE FROM transitions WHERE workflow_id = 'live'")

        with pytest.raises(Exception, match="append-only"):
            await store.conn.write(fn)
    else:
        assert isinstance(store, PostgresStore)
        async with await psycopg.AsyncConnection.connect(store.dsn) as conn:
            await conn.execute("SELECT set_config('statewright.prune', 'on', true)")
            with pytest.raises(psycopg.Error, match="append-only"):
                await conn.execute("DELETE FROM transitions WHERE workflow_id = 'live'")
    assert len(await engine.history("live")) == 1


async def test_a_slow_batch_halves_the_next(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every delete past the budget halves the next batch, down to one workflow: with a
    budget no delete meets, 7 workflows in batches of 4 go as 4 + 2 + 1."""
    monkeypatch.setattr(retention, "BATCH_SECONDS", 0.0)
    engine = engine_on(store)
    for i in range(7):
        await finished(engine, f"old-{i}")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(40 * DAY)
    report = await engine.prune(30 * DAY, batch=4)
    assert (report.workflows, report.batches) == (7, 3)  # 4, then 2, then 1


async def test_prune_deletes_old_finished_workflows_whole_and_keeps_the_rest(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches keep their size here: on a loaded machine a delete past the 10 ms budget would
    # halve the next batch and make the count below depend on timing (tested on its own in
    # test_a_slow_batch_halves_the_next).
    monkeypatch.setattr(retention, "BATCH_SECONDS", 60.0)
    engine = engine_on(store)
    for i in range(5):
        await finished(engine, f"old-{i}")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(40 * DAY)
    await finished(engine, "recent")
    await engine.start("job", {}, workflow_id="live")
    await engine.post_input("live", "note", {"text": "stays"})
    counts_before = {(t, s): n for t, s, n in await store.count_by_state()}

    dry = await engine.prune(30 * DAY, dry_run=True)
    assert (dry.workflows, dry.transitions, dry.steps, dry.inbox) == (5, 15, 5, 5)
    assert dry.dry_run and len(await store.export_workflows(["old-0"])) == 1

    report = await engine.prune(30 * DAY, batch=2)
    assert (report.workflows, report.transitions, report.steps, report.inbox) == (5, 15, 5, 5)
    assert report.rejections == 5 and report.batches == 3  # 2 + 2 + 1
    assert await store.export_workflows([f"old-{i}" for i in range(5)]) == []
    with pytest.raises(WorkflowNotFound):
        await engine.get("old-0")
    assert await store.history("old-0") == []
    for wid in ("recent", "live"):
        await engine.check(wid)
    assert len((await store.export_workflows(["live"]))[0]["inbox"]) == 1
    # the kept counts follow (the delete trigger)
    counts_after = {(t, s): n for t, s, n in await store.count_by_state()}
    assert counts_after[("job", "done")] == counts_before[("job", "done")] - 5 == 1
    assert counts_after[("job", "queued")] == 1
    # nothing left to do
    again = await engine.prune(30 * DAY)
    assert again.workflows == 0


async def test_prune_by_tenant_and_rejections_by_age(store: Store) -> None:
    engine = engine_on(store)
    await finished(engine, "a1", tenant="acme")
    await finished(engine, "b1", tenant="beta")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(10 * DAY)
    await engine.start("job", {}, workflow_id="live")
    with pytest.raises(IllegalTransition):
        await engine.send("live", "finish")  # a recent refusal
    report = await engine.prune(DAY, tenant="acme")
    assert report.workflows == 1
    await engine.get("b1")
    report = await engine.prune(99 * DAY, rejections_older_than=DAY)
    assert (report.workflows, report.rejections) == (0, 1)  # b1's old refusal, not live's
    assert len(await store.rejections(0.0)) == 1


async def test_archive_then_import_restores_rows_whose_replay_matches(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store)
    for i in range(3):
        await finished(engine, f"w{i}")
    before = await store.export_workflows(["w0", "w1", "w2"])
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    archive = tmp_path / "old.jsonl.gz"
    report = await engine.prune(DAY, archive=archive, batch=2)
    assert (report.workflows, report.archived) == (3, 3)
    with gzip.open(archive, "rt") as f:
        lines = [json.loads(ln) for ln in f]
    assert [r["id"] for r in lines] == ["w0", "w1", "w2"]

    done = await engine.import_archive(archive)
    assert done.imported == ["w0", "w1", "w2"] and not done.conflicts and not done.truncated
    for wid in ("w0", "w1", "w2"):
        await engine.check(wid)
    after = await store.export_workflows(["w0", "w1", "w2"])
    assert after == before
    # a re-import is a no-op; the same workflow with other data is refused
    again = await engine.import_archive(archive)
    assert again.identical == ["w0", "w1", "w2"] and again.imported == []
    lines[0]["workflow"]["updated_at"] += 1
    other = tmp_path / "other.jsonl.gz"
    with gzip.open(other, "wt") as f:
        f.write(json.dumps(lines[0]) + "\n")
    refused = await engine.import_archive(other)
    assert refused.conflicts == ["w0"]
    assert (await engine.get("w0")).updated_at == before[0]["workflow"]["updated_at"]


async def test_an_archive_cut_short_and_duplicate_lines_import(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store)
    for i in range(2):
        await finished(engine, f"w{i}")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    archive = tmp_path / "a.jsonl.gz"
    records = await store.export_workflows(["w0", "w1"])
    # a crash after the archive write, before the delete: the next prune archives again
    from statewright.engine.retention import ArchiveWriter

    ArchiveWriter(archive).append(records[:1])
    await engine.prune(DAY, archive=archive)
    # then a prune killed while writing a batch: a truncated last member
    whole = gzip.compress(b'{"format": 1, "id": "x"}\n' * 50)
    with open(archive, "ab") as f:
        f.write(whole[: len(whole) // 2])
    lines, truncated = read_archive(archive)
    assert [r["id"] for _, r in lines] == ["w0", "w0", "w1"] and truncated[0]
    done = await engine.import_archive(archive)
    assert done.imported == ["w0", "w1"] and done.identical == ["w0"] and done.truncated


async def test_bad_input_is_refused_and_changes_nothing(store: Store, tmp_path: Path) -> None:
    engine = engine_on(store)
    await finished(engine, "w0")
    for bad in (-1, float("nan"), float("inf"), "30d", True):
        with pytest.raises(InvalidInput):
            await engine.prune(bad)  # type: ignore[arg-type]
    for batch in (0, -5, 100_000):
        with pytest.raises(InvalidInput):
            await engine.prune(0, batch=batch)
    with pytest.raises(InvalidInput):
        await engine.prune(0, rejections_older_than=-1)
    with pytest.raises(InvalidInput):
        await engine.prune(0, archive=tmp_path / "no" / "such" / "dir.jsonl.gz")
    not_gz = tmp_path / "x.jsonl.gz"
    not_gz.write_text("hello\n")
    with pytest.raises(InvalidInput, match="not a gzip"):
        await engine.import_archive(not_gz)
    for first_line in ("[1, 2]", '{"id": "w9"}', "{not json"):
        not_ours = tmp_path / "not-ours.jsonl.gz"
        with gzip.open(not_ours, "wt") as f:
            f.write(first_line + "\n")
        with pytest.raises(InvalidInput, match="line 1"):
            await engine.import_archive(not_ours)
    bad_record = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad_record, "wt") as f:
        f.write('{"format": 1, "id": "w9", "workflow": {"id": "w9"}}\n')
    report = await engine.import_archive(bad_record)  # a record, malformed: refused alone
    assert [(r["line"], r["code"]) for r in report.refused] == [(1, "invalid_input")]
    assert report.imported == []
    with pytest.raises(InvalidInput, match="max_record_bytes"):
        await engine.import_archive(bad_record, max_record_bytes=0)
    with pytest.raises(InvalidInput, match="no such archive"):
        await engine.import_archive(tmp_path / "missing.jsonl.gz")
    await engine.get("w0")


async def test_concurrent_prunes_delete_each_workflow_once(store: Store) -> None:
    engine = engine_on(store)
    for i in range(12):
        await finished(engine, f"w{i:02d}")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    other = Engine(store, [machine()], clock=engine.clock)
    reports = await asyncio.gather(
        engine.prune(DAY, batch=3), other.prune(DAY, batch=3), engine.prune(DAY, batch=5)
    )
    assert sum(r.workflows for r in reports) == 12
    assert sum(r.transitions for r in reports) == 36
    assert await store.prunable(1e18, tenant=None, after=None, limit=100) == []


def test_durations() -> None:
    assert [parse_duration(d) for d in ("0s", "90m", "12h", "30d", "1.5h", "2w")] == [
        0.0,
        5400.0,
        43200.0,
        2592000.0,
        5400.0,
        1209600.0,
    ]
    for bad in ("", "30", "d", "-1d", "1y", "10 days", "1d2h"):
        with pytest.raises(InvalidInput, match="bad duration"):
            parse_duration(bad)


async def test_workers_prune_periodically_side_by_side(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_on(store)
    for i in range(10):
        await finished(engine, f"w{i}")
    await engine.start("job", {}, workflow_id="live")
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    with pytest.raises(InvalidInput, match="prune_every"):
        Worker(engine, prune_terminal_older_than=DAY, prune_every=0)
    workers = [
        Worker(engine, prune_terminal_older_than=DAY, prune_every=0.05, poll_interval=0.05)
        for _ in range(2)
    ]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    for _ in range(200):
        if not await store.prunable(1e18, tenant=None, after=None, limit=10):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # a few more rounds, with nothing left to prune
    for w in workers:
        w.stop()
    await asyncio.gather(*tasks)
    assert await store.prunable(1e18, tenant=None, after=None, limit=10) == []
    await engine.check("live")
    assert "prune failed" not in caplog.text


async def test_an_sqlite_archive_imports_into_postgres_and_back(
    tmp_path: Path, pg_dsn: str
) -> None:
    lite = SQLiteStore(tmp_path / "a.db")
    await lite.open()
    engine = engine_on(lite)
    for i in range(2):
        await finished(engine, f"w{i}")
    before = await lite.export_workflows(["w0", "w1"])
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    archive = tmp_path / "a.jsonl.gz"
    await engine.prune(DAY, archive=archive)
    await lite.close()

    pg = PostgresStore(pg_dsn)
    await pg.open()
    try:
        other = engine_on(pg)
        done = await other.import_archive(archive)
        assert done.imported == ["w0", "w1"]
        assert await pg.export_workflows(["w0", "w1"]) == before
        for wid in ("w0", "w1"):
            await other.check(wid)
        assert isinstance(other.clock, ManualClock)
        other.clock.advance(3 * DAY)
        back = tmp_path / "b.jsonl.gz"
        assert (await other.prune(DAY, archive=back)).workflows == 2
    finally:
        await pg.close()
    again = SQLiteStore(tmp_path / "b.db")
    await again.open()
    try:
        assert (await engine_on(again).import_archive(back)).imported == ["w0", "w1"]
        assert await again.export_workflows(["w0", "w1"]) == before
    finally:
        await again.close()


DAY = 86400.0


def id_of(record: Any) -> int:
    return int(record.id)
