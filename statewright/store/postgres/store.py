"""The PostgreSQL store: any number of processes on any number of hosts share one database.
Every part, composed."""

from __future__ import annotations

from statewright.store.outbox import AlertOutboxSQL
from statewright.store.postgres.read_model import PostgresReadModel
from statewright.store.postgres.retention import PostgresRetention
from statewright.store.postgres.timers import PostgresTimers
from statewright.store.postgres.transactional import PostgresTransactional
from statewright.store.postgres.transitions import PostgresTransitions
from statewright.store.postgres.workers import PostgresWorkers
from statewright.store.schedules import SchedulesSQL


class PostgresStore(
    PostgresTransitions,
    PostgresWorkers,
    PostgresTimers,
    PostgresReadModel,
    PostgresRetention,
    SchedulesSQL,
    AlertOutboxSQL,
    PostgresTransactional,
):
    """Every part of the store (:class:`~statewright.store.protocol.FullStore`) on
    PostgreSQL.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        min_size: connections the pool keeps open.
        max_size: connections the pool opens at most (concurrent operations beyond it queue).
        timeout: seconds an operation waits for a connection before failing with
            :class:`~statewright.errors.StoreError` (fail closed while the server is down).
        reconnect_timeout: seconds the pool keeps retrying a lost connection in the background
            (with a doubling delay) before leaving it to the next operation to open one. Short,
            so the store recovers within seconds of the server's return instead of after a
            backoff as long as the outage.
        connect_kwargs: extra arguments for every connection (``psycopg.AsyncConnection``).
        group_commit: concurrent transitions share one round trip and one commit
            (:mod:`.batch`; counters on ``batcher``). False sends each alone.
    """
