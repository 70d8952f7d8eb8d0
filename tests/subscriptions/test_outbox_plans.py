"""The outbox's claim reads indexes only, on both stores, with many rows: due rows from
``alert_outbox_due``, the earlier rows of a notification's (subscription, workflow) from
``alert_outbox_order`` (never a scan of the outbox per row)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from statewright.store import SQLiteStore
from statewright.store.queries import load_queries

FILL = """
INSERT INTO alert_outbox (receiver, fingerprint, status, idempotency_key, alert, created_at,
                          next_at, kind, subscription, order_key)
SELECT 'http://r', 'w' || (i % 5000), 'transition', 'k' || i, {body}, 1.0,
       CASE WHEN i % 3 = 0 THEN 5.0 ELSE NULL END, 'transition', 's' || (i % 4),
       'w' || (i % 5000)
  FROM {series}
"""


VALUES = {"claim": "c", "now": 10.0, "until": 20.0, "limit": 10}


async def test_claim_plan_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    series = (
        "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60000)"
        " SELECT i FROM n)"
    )
    conn.execute(FILL.format(body="'{}'", series=series))
    conn.commit()
    sql = load_queries("sqlite")["alert_claim"]
    plan = "\n".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, VALUES))
    assert "alert_outbox_due" in plan and "alert_outbox_order" in plan, plan
    assert "SCAN o\n" not in plan + "\n" and "SCAN e\n" not in plan + "\n", plan
    conn.close()


async def test_claim_plan_on_postgres(pg_dsn: str) -> None:
    sql = load_queries("postgres")["alert_claim"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(FILL.format(body="'{}'::jsonb", series="generate_series(1, 60000) AS i"))
        conn.execute("VACUUM ANALYZE alert_outbox")
        rows = conn.execute("EXPLAIN " + sql, VALUES).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert "Seq Scan on alert_outbox" not in plan, plan
    assert "alert_outbox_order" in plan, plan
