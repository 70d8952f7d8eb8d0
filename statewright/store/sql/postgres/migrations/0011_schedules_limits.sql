-- 0011_schedules_limits: cron schedules that start workflows, the per-type rows that
-- serialize the claims of a limited type (and hold its token bucket), and the due workflows
-- by type (the claims of a worker with limited types). Its predicate leaves `terminal` out
-- on purpose: the claims that must read it test `terminal IS NOT TRUE`, which workflows_due's
-- predicate (`NOT terminal`) does not cover, so the planner cannot take workflows_due
-- instead (with the type unknown to a generic plan, it would, and read past the due
-- backlog of every other type).

CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    input JSONB NOT NULL,
    tenant TEXT NOT NULL,
    paused BOOLEAN NOT NULL DEFAULT false,
    next_at DOUBLE PRECISION NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    last_tick DOUBLE PRECISION,
    last_workflow_id TEXT,
    last_error TEXT
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;

CREATE TABLE type_limits (
    type TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at DOUBLE PRECISION NOT NULL
);

CREATE INDEX workflows_type_due ON workflows (type, next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL;
