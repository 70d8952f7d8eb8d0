"""What keeps the PostgreSQL store's large reads off the event loop and its probe off the
pool.

- **Large reads.** psycopg decodes each JSONB value as the rows are fetched, on the event
  loop. The reads that return many values (a page of the log, of the steps, of workflows)
  fetch them as text instead (:func:`defer_json`: each value a :class:`RawJson`) and decode
  them with the rows' conversion, off the event loop when they are large
  (:func:`decode_rows`, :mod:`statewright.offload`).
- **The probe.** Readiness probes use a connection of their own (:class:`Probe`), outside the
  pool: reads that take every pooled connection do not make the probe wait for one (nor
  answer "unavailable" after the pool's timeout while the server is fine).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.abc import Buffer
from psycopg.rows import DictRow
from psycopg.types.json import JsonbLoader, JsonLoader

from statewright import jsonvalue, offload
from statewright.errors import StoreError
from statewright.store.rows import Rows, same

log = logging.getLogger(__name__)
T = TypeVar("T")

ROWS = Rows(same)
"""PostgreSQL's rows as records: psycopg decodes JSONB (with ``jsonvalue.loads``, see
``_configure`` in :mod:`.base`), or :func:`decode_rows` does."""

PING = "SELECT max(version) FROM schema_migrations"
"""The server answers, and the store's schema is there."""


class RawJson(bytes):
    """A JSON value's text as the server sent it, decoded later by :func:`decode_rows`."""


class _RawJsonLoader(JsonLoader):
    def load(self, data: Buffer) -> RawJson:
        return RawJson(data)


class _RawJsonbLoader(JsonbLoader):
    def load(self, data: Buffer) -> RawJson:
        return RawJson(data)


def defer_json(cursor: psycopg.AsyncCursor[Any]) -> psycopg.AsyncCursor[Any]:
    """``cursor``, fetching JSON and JSONB values as :class:`RawJson` (text, not decoded)."""
    cursor.adapters.register_loader("json", _RawJsonLoader)
    cursor.adapters.register_loader("jsonb", _RawJsonbLoader)
    return cursor


def _decoded(row: DictRow) -> DictRow:
    for name, value in row.items():
        if isinstance(value, RawJson):
            row[name] = jsonvalue.loads(value)
    return row


async def decode_rows(rows: Sequence[DictRow], convert: Callable[[DictRow], T]) -> list[T]:
    """``convert`` each row once its :class:`RawJson` values are decoded: off the event loop
    when they are large."""
    size = sum(len(v) for row in rows for v in row.values() if isinstance(v, RawJson))
    return await offload.convert(rows, lambda row: convert(_decoded(row)), size)


class Probe:
    """One connection for readiness probes, opened on the first :meth:`ping` and kept;
    opened again when it fails (a kept connection that a server restart broke gets one more
    try on a new one, so the first probe after the restart does not fail for nothing)."""

    def __init__(self, dsn: str, connect_kwargs: dict[str, Any], where: str) -> None:
        self.dsn = dsn
        self.connect_kwargs = connect_kwargs
        self.where = where
        self._conn: AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def ping(self) -> None:
        """Return once the server answered :data:`PING`; StoreError when it cannot."""
        async with self._lock:  # one connection, one query at a time
            for last in (self._conn is None, True):
                try:
                    if self._conn is None:
                        self._conn = await AsyncConnection.connect(
                            self.dsn, autocommit=True, **self.connect_kwargs
                        )
                    await self._conn.execute(PING)
                    return
                except psycopg.Error as exc:
                    await self.close()
                    if last:
                        raise StoreError(
                            f"PostgreSQL ({self.where}) does not answer: {exc}"
                        ) from exc
                except BaseException:  # cancelled (timed out) mid-query: its state is unknown
                    await self.close()
                    raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:
                log.debug("closing the probe connection failed", exc_info=True)
