"""The children of ``test_processes_opening_a_fresh_database_at_once_all_succeed``
(tests/store/sqlite/test_sqlite.py): processes that open (and close) a SQLite store at a given
moment, forked by a fork server (tests/forkserver.py) that has imported the store once.
"""

from __future__ import annotations

import asyncio
import time

PRELOAD = ("statewright", "statewright.store.sqlite")


def open_at(argv: list[str]) -> None:
    """``[db, at]``: sleep until just before ``at`` (a ``time.time()``), spin until it, then
    open the store on ``db`` (a fresh file, created and migrated by whoever comes first)."""
    from statewright import SQLiteStore

    db, at = argv[0], float(argv[1])

    async def main() -> None:
        time.sleep(max(0.0, at - time.time() - 0.02))  # then spin: all open at once
        while time.time() < at:
            pass
        store = SQLiteStore(db)
        await store.open()
        await store.close()

    asyncio.run(main())
