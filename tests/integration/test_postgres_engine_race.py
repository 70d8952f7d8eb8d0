"""16 engines (clients) race events onto the same 100 workflows on one PostgreSQL."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from statewright import Engine, MachineBuilder
from statewright.errors import VersionConflict
from statewright.store.postgres import PostgresStore

PINGPONG = (
    MachineBuilder("pingpong")
    .state("a", initial=True)
    .state("b")
    .state("end", terminal=True)
    .event("go")
    .event("back")
    .event("stop")
    .transition("go", "a", "b")
    .transition("back", "b", "a")
    .transition("stop", ["a", "b"], "end")
    .build()
)
CLIENTS, WORKFLOWS, EVENTS_EACH = 16, 100, 25


async def test_sixteen_engines_race_on_one_hundred_workflows(pg_dsn: str) -> None:
    engines = [Engine(PostgresStore(pg_dsn, max_size=1), [PINGPONG]) for _ in range(CLIENTS)]
    for e in engines:
        await e.open()
    try:
        ids = [f"w{i:03d}" for i in range(WORKFLOWS)]
        for wid in ids:
            await engines[0].start("pingpong", workflow_id=wid)
        acked: list[tuple[str, int, str]] = []
        conflicts = 0

        async def client(n: int, engine: Engine) -> None:
            nonlocal conflicts
            rng = random.Random(n)
            for k in range(EVENTS_EACH):
                wid, tag = rng.choice(ids), f"c{n}-{k}"
                while True:
                    row = await engine.get(wid)
                    event = "go" if row.state == "a" else "back"
                    try:
                        after = (
                            await engine.send(
                                wid,
                                event,
                                {"tag": tag},
                                actor=f"client-{n}",
                                expected_version=row.version,
                            )
                        ).row
                    except VersionConflict:
                        conflicts += 1  # the loser re-reads and decides again
                        continue
                    acked.append((wid, after.version, tag))
                    break

        await asyncio.gather(*(client(n, e) for n, e in enumerate(engines)))
        assert conflicts > 0, "no client ever lost a race: the test proves nothing"
        logged: dict[tuple[str, int], str] = {}
        for wid in ids:
            history = await engines[0].history(wid)
            assert [t.version for t in history] == list(range(1, len(history) + 1)), wid
            await engines[0].check(wid)
            logged.update({(wid, t.version): t.payload["tag"] for t in history[1:]})
        assert logged == {
            (
                wid,
                v,
            ): tag
            for wid, v, tag in acked
        }
        assert max(Counter(logged.values()).values()) == 1  # no event applied twice
    finally:
        for e in engines:
            await e.close()
