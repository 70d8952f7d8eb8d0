"""The core part of the contract runs against every backend and against a store that has the
core protocol only (:class:`CoreOnly`): a test here that needs another part fails there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from statewright.store import SQLiteStore, Store
from statewright.store.protocol import FullStore
from tests.store.conftest import BACKENDS, backend

CORE = frozenset(name for name in vars(Store) if not name.startswith("_"))
"""The methods of the core protocol."""


class CoreOnly:
    """A store with the core protocol and nothing else: the methods of
    :class:`~statewright.store.protocol.Store`, answered by a full store behind it."""

    def __init__(self, inner: FullStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in CORE:
            return getattr(self._inner, name)
        raise AttributeError(f"a store with the core protocol only has no {name!r}")

    def __repr__(self) -> str:
        return f"CoreOnly({self._inner!r})"


@pytest.fixture(params=[*BACKENDS, "core-only"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every backend, and the core protocol alone (over SQLite)."""
    if request.param == "core-only":
        inner = SQLiteStore(tmp_path / "core.db")
        await inner.open()
        yield cast(Store, CoreOnly(inner))
        await inner.close()
        return
    s = backend(request, tmp_path)
    await s.open()
    yield s
    await s.close()
