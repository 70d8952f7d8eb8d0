"""The store contract of paging and counting, on every backend: keyset pages of listings,
step ledgers and logs cover everything exactly once in a total order, and stuck and parked
workflows are counted (true counts) and paged by cutoffs that may differ per machine version.
"""

from __future__ import annotations

from typing import Any

from statewright.store.protocol import FullStore as Store
from statewright.types import StepFinish, StuckCutoff, WorkflowFilter, WorkflowRow
from tests.store.contract.writes import T0, defer, move, new


async def _seed(store: Store) -> list[WorkflowRow]:
    """30 workflows: ties on the time entered, two types, three states, two tenants, some
    ended, one of machine version 2."""
    rows = []
    for i in range(30):
        row, _ = await store.create_workflow(
            new(
                f"w{i:02d}"[::-1],  # ids not in creation order
                type="t" if i % 4 else "u",
                state=["a", "b", "c"][i % 3],
                at=T0 + i // 4,  # ties
                tenant="acme" if i % 5 else "globex",
                terminal=i % 7 == 0,
                machine_version=2 if i == 13 else 1,
            )
        )
        rows.append(row)
    return rows


def _order(rows: list[WorkflowRow]) -> list[str]:
    return [r.id for r in sorted(rows, key=lambda r: (r.state_entered_at, r.id))]


async def _pages(store: Store, where: WorkflowFilter, size: int) -> list[str]:
    seen: list[str] = []
    after = None
    for _ in range(100):
        page = await store.list_workflows(
            WorkflowFilter(**{**where.__dict__, "limit": size, "after": after})
        )
        seen += [r.id for r in page]
        if len(page) < size:
            return seen
        after = (page[-1].state_entered_at, page[-1].id)
    raise AssertionError("paging never ended")


async def test_listing_pages_cover_every_match_once_in_order(store: Store) -> None:
    rows = await _seed(store)
    filters: list[tuple[WorkflowFilter, Any]] = [
        (WorkflowFilter(), lambda r: True),
        (WorkflowFilter(terminal=False), lambda r: not r.terminal),
        (WorkflowFilter(terminal=True), lambda r: r.terminal),
        (WorkflowFilter(state="b"), lambda r: r.state == "b"),
        (WorkflowFilter(type="t", state="a"), lambda r: (r.type, r.state) == ("t", "a")),
        (WorkflowFilter(type="u"), lambda r: r.type == "u"),
        (WorkflowFilter(tenant="acme"), lambda r: r.tenant == "acme"),
        (
            WorkflowFilter(tenant="globex", terminal=False, entered_before=T0 + 6),
            lambda r: r.tenant == "globex" and not r.terminal and r.state_entered_at < T0 + 6,
        ),
        (WorkflowFilter(entered_after=T0 + 3), lambda r: r.state_entered_at >= T0 + 3),
    ]
    for where, keep in filters:
        expected = _order([r for r in rows if keep(r)])
        assert expected, where
        whole = await store.list_workflows(WorkflowFilter(**{**where.__dict__, "limit": 100}))
        assert [r.id for r in whole] == expected, where
        for size in (1, 4, 7):
            assert await _pages(store, where, size) == expected, (where, size)
    # offset still works, with and without filters
    everything = _order(rows)
    page = await store.list_workflows(WorkflowFilter(limit=5, offset=12))
    assert [r.id for r in page] == everything[12:17]
    page = await store.list_workflows(WorkflowFilter(terminal=False, limit=3, offset=2))
    assert [r.id for r in page] == _order([r for r in rows if not r.terminal])[2:5]


async def test_a_keyset_past_the_end_or_before_the_start(store: Store) -> None:
    rows = await _seed(store)
    assert await store.list_workflows(WorkflowFilter(after=(T0 + 1000, ""))) == []
    first = await store.list_workflows(WorkflowFilter(after=(T0 - 1, "zzz"), limit=3))
    assert [r.id for r in first] == _order(rows)[:3]


async def test_steps_page_by_start_time_and_key(store: Store) -> None:
    await store.create_workflow(new())
    keys = []
    for i in range(11):
        key = f"w1:s{10 - i}"  # keys not in start order
        await store.step_begin(key, "w1", f"s{i}", T0 + i // 3)  # ties on the start time
        keys.append(key)
    await store.step_finish(StepFinish(keys[0], 1, "done", {"ok": True}, at=T0 + 5))
    everything = await store.steps("w1")
    expected = [s.key for s in sorted(everything, key=lambda s: (s.started_at, s.key))]
    assert [s.key for s in everything] == expected and sorted(expected) == sorted(keys)
    for size in (1, 3, 4):
        seen: list[str] = []
        after = None
        while True:
            page = await store.steps("w1", after=after, limit=size)
            seen += [s.key for s in page]
            if len(page) < size:
                break
            after = (page[-1].started_at, page[-1].key)
        assert seen == expected, size
    assert await store.steps("nope", limit=5) == []


def _cutoffs(now: float) -> list[StuckCutoff]:
    return [
        StuckCutoff("t", "a", now - 3),  # t in a: stuck after 3 s
        StuckCutoff("t", "b", now - 10),
        StuckCutoff("t", "b", now - 1, machine_version=2),  # version 2: after 1 s
        StuckCutoff("u", "a", None),  # u in a: never (terminal there, say)
        StuckCutoff("u", "a", now - 2, machine_version=7),
        StuckCutoff("u", "c", now - 4),
    ]


def _stuck_by_hand(rows: list[WorkflowRow], now: float) -> list[WorkflowRow]:
    rules: dict[tuple[str, str], dict[int | None, float | None]] = {
        ("t", "a"): {None: 3.0},
        ("t", "b"): {None: 10.0, 2: 1.0},
        ("u", "a"): {None: None, 7: 2.0},
        ("u", "c"): {None: 4.0},
    }
    out = []
    for r in rows:
        rule = rules.get((r.type, r.state))
        if rule is None:
            continue
        threshold = rule.get(r.machine_version, rule[None])
        if threshold is not None and r.state_entered_at < now - threshold:
            out.append(r)
    return sorted(out, key=lambda r: (r.type, r.state, r.state_entered_at, r.id))


async def _forty_in_groups(store: Store) -> list[WorkflowRow]:
    """Forty workflows over two types, three states, two tenants and three versions, entered
    at tied instants: the stuck tests' store."""
    rows = []
    for i in range(40):
        row, _ = await store.create_workflow(
            new(
                f"s{i:02d}"[::-1],
                type="t" if i % 2 else "u",
                state=["a", "b", "c"][i % 3],
                at=T0 + i // 5,  # ties
                tenant="acme" if i % 4 else "globex",
                machine_version={7: 2, 14: 2, 22: 2, 6: 7, 18: 7}.get(i, 1),
            )
        )
        rows.append(row)
    return rows


async def test_stuck_counts_and_pages_follow_the_cutoffs_of_each_version(
    store: Store,
) -> None:
    rows = await _forty_in_groups(store)
    now = T0 + 9
    expected = _stuck_by_hand(rows, now)
    assert len(expected) > 10
    counted = await store.count_stuck(_cutoffs(now))
    by_group: dict[tuple[str, str], list[WorkflowRow]] = {}
    for r in expected:
        by_group.setdefault((r.type, r.state), []).append(r)
    assert counted == [
        (t, s, len(found), min(r.state_entered_at for r in found))
        for (t, s), found in sorted(by_group.items())
    ]
    for size in (1, 3, 100):
        seen: list[str] = []
        after = None
        while True:
            page = await store.stuck_workflows(_cutoffs(now), after=after, limit=size)
            seen += [r.id for r in page]
            if len(page) < size:
                break
            last = page[-1]
            after = (last.type, last.state, last.state_entered_at, last.id)
        assert seen == [r.id for r in expected], size
    acme = [r for r in expected if r.tenant == "acme"]
    page = await store.stuck_workflows(_cutoffs(now), tenant="acme", limit=100)
    assert [r.id for r in page] == [r.id for r in acme]
    assert sum(n for _, _, n, _ in await store.count_stuck(_cutoffs(now), "acme")) == len(acme)
    # Nothing is stuck earlier, nothing without cutoffs.
    assert await store.count_stuck(_cutoffs(T0)) == []
    assert await store.stuck_workflows(_cutoffs(T0)) == []
    assert await store.count_stuck([]) == [] and await store.stuck_workflows([]) == []


async def test_many_states_are_counted_in_one_go(store: Store) -> None:
    # More groups than one statement counts (and than SQLite allows in a compound SELECT).
    for i in range(3):
        await store.create_workflow(new(f"m{i}", state=f"s{i * 200}"))
    cutoffs = [StuckCutoff("t", f"s{i}", T0 + 1) for i in range(600)]
    assert await store.count_stuck(cutoffs) == [
        ("t", "s0", 1, T0),
        ("t", "s200", 1, T0),
        ("t", "s400", 1, T0),
    ]
    assert [r.id for r in await store.stuck_workflows(cutoffs, limit=2)] == ["m0", "m1"]


async def test_parked_workflows_are_counted_by_type_state_and_reason(store: Store) -> None:
    for wid, type_, tenant, at in (
        ("p1", "t", "acme", T0 + 1),
        ("p2", "t", "globex", T0),
        ("p3", "u", "acme", T0 + 2),
        ("p4", "t", "acme", T0 + 3),
    ):
        await store.create_workflow(new(wid, type=type_, tenant=tenant, at=at))
    await store.create_workflow(new("live"))
    assert await store.count_parked() == []
    for wid in ("p1", "p2", "p3"):
        await store.defer(defer(wid, 1, parked="step_outcome_unknown", last_error="?"))
    await store.defer(defer("p4", 1, parked="fatal_error", last_error="boom"))
    unknown = "step_outcome_unknown"
    assert await store.count_parked() == [
        ("t", "a", "fatal_error", 1, T0 + 3),
        ("t", "a", unknown, 2, T0),
        ("u", "a", unknown, 1, T0 + 2),
    ]
    assert await store.count_parked("acme") == [
        ("t", "a", "fatal_error", 1, T0 + 3),
        ("t", "a", unknown, 1, T0 + 1),
        ("u", "a", unknown, 1, T0 + 2),
    ]
    # Listed from their partial index, in listing order.
    parked = await store.list_workflows(WorkflowFilter(type="t", state="a", parked=True))
    assert [r.id for r in parked] == ["p2", "p1", "p4"]
    mine = WorkflowFilter(type="t", state="a", parked=True, tenant="acme", limit=1)
    assert [r.id for r in await store.list_workflows(mine)] == ["p1"]
    await store.apply_transition(move("p1", 1))  # a transition ends the parking
    assert await store.count_parked() == [
        ("t", "a", "fatal_error", 1, T0 + 3),
        ("t", "a", unknown, 1, T0),
        ("u", "a", unknown, 1, T0 + 2),
    ]
    parked = await store.list_workflows(WorkflowFilter(parked=True))
    assert [r.id for r in parked] == ["p2", "p3", "p4"]


async def test_parked_workflows_are_stuck_from_the_moment_they_park(store: Store) -> None:
    rows = await _forty_in_groups(store)
    # Park every third one, young and old, in every group (versions with their own cutoffs
    # and the versions a group's default calls never stuck included), and one in a state no
    # cutoff names.
    parked = {r.id for i, r in enumerate(rows) if i % 3 == 1 or i in (6, 18, 12, 24)}
    await store.create_workflow(new("elsewhere", state="z"))
    for wid in [*parked, "elsewhere"]:
        await store.defer(defer(wid, 1, parked="step_outcome_unknown", last_error="?"))
    rows = [await store.get_workflow(r.id) for r in rows]  # type: ignore[misc]
    now = T0 + 5
    old = _stuck_by_hand(rows, now)  # past the threshold, parked or not
    named = {(c.type, c.state) for c in _cutoffs(now)}  # the states the cutoffs know
    young = [r for r in rows if r.id in parked and r not in old and (r.type, r.state) in named]
    assert len(old) >= 5 and len(young) >= 5
    expected = sorted(old + young, key=lambda r: (r.type, r.state, r.state_entered_at, r.id))
    # Without parked: as before (the parked ones only once past the threshold).
    assert [r.id for r in await store.stuck_workflows(_cutoffs(now), limit=100)] == [
        r.id for r in old
    ]
    by_group: dict[tuple[str, str], list[WorkflowRow]] = {}
    for r in expected:
        by_group.setdefault((r.type, r.state), []).append(r)
    assert await store.count_stuck(_cutoffs(now), parked=True) == [
        (t, s, len(found), min(r.state_entered_at for r in found))
        for (t, s), found in sorted(by_group.items())
    ]
    for size in (1, 3, 7, 100):
        seen: list[str] = []
        after = None
        while True:
            page = await store.stuck_workflows(_cutoffs(now), after=after, limit=size, parked=True)
            seen += [r.id for r in page]
            if len(page) < size:
                break
            last = page[-1]
            after = (last.type, last.state, last.state_entered_at, last.id)
        assert seen == [r.id for r in expected], size
    acme = [r for r in expected if r.tenant == "acme"]
    page = await store.stuck_workflows(_cutoffs(now), tenant="acme", limit=100, parked=True)
    assert [r.id for r in page] == [r.id for r in acme]
    counted = await store.count_stuck(_cutoffs(now), "acme", parked=True)
    assert sum(n for _, _, n, _ in counted) == len(acme)
    # Before any threshold passes, the parked ones are stuck all the same.
    early = await store.stuck_workflows(_cutoffs(T0), limit=100, parked=True)
    assert {r.id for r in early} == {r.id for r in expected if r.id in parked}
    # A transition ends the parking: no longer stuck (it is young).
    first = young[0]
    await store.apply_transition(
        move(first.id, first.version, to=first.state, from_state=first.state)
    )
    after_move = await store.stuck_workflows(_cutoffs(now), limit=100, parked=True)
    assert first.id not in {r.id for r in after_move}
    assert len(after_move) == len(expected) - 1


async def test_unresolved_steps_are_those_of_unknown_outcome(store: Store) -> None:
    for wid in ("w1", "w2", "w3"):
        await store.create_workflow(new(wid))
    for wid, step, at, end in (
        ("w1", "done", T0, ("done", None)),
        ("w1", "hung", T0 + 1, None),  # still executing: its outcome is unknown
        ("w1", "timed_out", T0 + 2, ("failed", "unknown")),
        ("w1", "refused", T0 + 3, ("failed", "not_applied")),
        ("w2", "charge", T0, ("failed", "unknown")),
        ("w3", "ok", T0, ("done", None)),
    ):
        key = f"{wid}:{step}"
        await store.step_begin(key, wid, step, at)
        if end is not None:
            status, outcome = end
            await store.step_finish(
                StepFinish(key, 1, status, result=1, outcome=outcome, at=at)  # type: ignore[arg-type]
            )
    found = await store.unresolved_steps(["w3", "w2", "w1", "nope"])
    assert [(s.workflow_id, s.step) for s in found] == [
        ("w1", "hung"),
        ("w1", "timed_out"),
        ("w2", "charge"),
    ]
    assert await store.unresolved_steps(["w3"]) == []
    assert await store.unresolved_steps([]) == []
