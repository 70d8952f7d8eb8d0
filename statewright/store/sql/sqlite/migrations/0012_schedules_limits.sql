-- 0012_schedules_limits: cron schedules that start workflows, the per-type token buckets of
-- rate-limited claims, and the due workflows by type (the claim of a limited type).

CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    input TEXT NOT NULL,
    tenant TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_tick REAL,
    last_workflow_id TEXT,
    last_error TEXT
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE paused = 0;

CREATE TABLE type_limits (
    type TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    refilled_at REAL NOT NULL
);

CREATE INDEX workflows_type_due ON workflows (type, next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL;
