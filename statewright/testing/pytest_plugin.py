"""statewright's pytest plugin: fixtures for testing workflows (loaded on install).

Registered as the ``statewright`` ``pytest11`` entry point, so installing statewright gives
every pytest session these fixtures:

- ``statewright_clock``: a :class:`~statewright.clock.ManualClock` (time moves only when
  you ``advance`` it);
- ``statewright_engine``: an open engine on in-memory SQLite using that clock, closed after
  the test; register your types with ``statewright_engine.register(...)``;
- ``statewright_sqlite_engine``: the same on an SQLite file in the test's ``tmp_path``
  (WAL, migrations, a real file: for tests that reopen it).

The engine fixtures are async: they need pytest-asyncio (auto mode, or mark the test with
``@pytest.mark.asyncio``). Importing this plugin imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from statewright.clock import ManualClock
    from statewright.engine.core import Engine

try:  # strict mode needs pytest-asyncio's own decorator; auto mode accepts it too
    import pytest_asyncio

    _async_fixture: Callable[..., Any] = pytest_asyncio.fixture
except ImportError:  # pragma: no cover - without pytest-asyncio (e.g. anyio's plugin)
    _async_fixture = pytest.fixture


@pytest.fixture
def statewright_clock() -> ManualClock:
    """A manual clock, shared by the engine fixtures of the same test."""
    from statewright.clock import ManualClock

    return ManualClock()


@_async_fixture
async def statewright_engine(statewright_clock: ManualClock) -> AsyncIterator[Engine]:
    """An open engine on in-memory SQLite with ``statewright_clock``; closed after."""
    from statewright.testing import memory_engine

    async with memory_engine(clock=statewright_clock) as engine:
        yield engine


@_async_fixture
async def statewright_sqlite_engine(
    statewright_clock: ManualClock, tmp_path: Path
) -> AsyncIterator[Engine]:
    """An open engine on an SQLite file in ``tmp_path`` with ``statewright_clock``."""
    from statewright.engine.core import Engine
    from statewright.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "statewright.db"))
    async with Engine(store, clock=statewright_clock) as engine:
        yield engine
