"""The embedded SQLite store (WAL mode, zero setup): every part, composed."""

from __future__ import annotations

from statewright.store.outbox import AlertOutboxSQL
from statewright.store.schedules import SchedulesSQL
from statewright.store.sqlite.read_model import SQLiteReadModel
from statewright.store.sqlite.retention import SQLiteRetention
from statewright.store.sqlite.timers import SQLiteTimers
from statewright.store.sqlite.transactional import SQLiteTransactional
from statewright.store.sqlite.transitions import SQLiteTransitions
from statewright.store.sqlite.workers import SQLiteWorkers


class SQLiteStore(
    SQLiteTransitions,
    SQLiteWorkers,
    SQLiteTimers,
    SQLiteReadModel,
    SQLiteRetention,
    SchedulesSQL,
    AlertOutboxSQL,
    SQLiteTransactional,
):
    """Every part of the store (:class:`~statewright.store.protocol.FullStore`) on one
    SQLite file (or ``:memory:``).

    Args:
        path: database file; created with its folder when missing.
        synchronous: ``FULL`` (fsync every commit: durable against power loss) or ``NORMAL``
            (WAL fsyncs at checkpoints: durable against process crashes).
        busy_timeout: seconds a statement waits for another process's lock.
    """
