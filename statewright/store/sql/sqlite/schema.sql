-- The whole schema as the migrations leave it (checked by tests/migration).

CREATE TABLE workflows (
    id               TEXT PRIMARY KEY,
    type             TEXT    NOT NULL,
    machine_version  INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    context          TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    terminal         INTEGER NOT NULL DEFAULT 0,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    state_entered_at REAL    NOT NULL,
    next_due_at      REAL,
    lease_owner      TEXT,
    lease_expires_at REAL,
    last_error       TEXT,
    cancel_requested TEXT,
    progress         TEXT,
    tenant           TEXT    NOT NULL DEFAULT 'default',
    fence            INTEGER NOT NULL DEFAULT 0,
    total_attempts   INTEGER NOT NULL DEFAULT 0,
    cancel_actor     TEXT,
    cancel_at        REAL,
    cancel_version   INTEGER,
    cancel_key       TEXT,
    parked           TEXT
);

-- Listings are ordered by (state_entered_at, id): each filter has an index in that order.
-- "by type, state and age" (stuck detection and counts, listings)
CREATE INDEX workflows_state_age ON workflows (type, state, state_entered_at, id);
-- a tenant's listings
CREATE INDEX workflows_tenant ON workflows (tenant, state_entered_at, id);
-- listings by state without a type
CREATE INDEX workflows_state ON workflows (state, state_entered_at, id);
-- live or ended workflows (and, the two ranges merged, all of them)
CREATE INDEX workflows_terminal_age ON workflows (terminal, state_entered_at, id);
-- parked workflows (waiting for an operator: stuck from the moment they park), by type
-- and state in listing order; the reason makes their counts by reason index-only
CREATE INDEX workflows_parked ON workflows (type, state, state_entered_at, id, parked)
    WHERE parked IS NOT NULL;
-- the worker's claim: due and unleased only
CREATE INDEX workflows_due ON workflows (next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL;
CREATE INDEX workflows_lease ON workflows (lease_expires_at)
    WHERE lease_owner IS NOT NULL;
-- workflows whose retry counter is not 0 (retry flapping), in listing order
CREATE INDEX workflows_retrying ON workflows (state_entered_at, id) WHERE attempts > 0;

CREATE TABLE transitions (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id   TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    from_state    TEXT,
    to_state      TEXT    NOT NULL,
    event         TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    actor         TEXT    NOT NULL,
    context_patch TEXT,
    at            REAL    NOT NULL,
    idempotency_key TEXT,
    messages      TEXT
);
-- "history of one workflow"; also makes a doubled transition impossible
CREATE UNIQUE INDEX transitions_workflow_version ON transitions (workflow_id, version);
-- a client's idempotency key: one transition per key and workflow
CREATE UNIQUE INDEX transitions_idempotency ON transitions (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- recent transitions of some events (retry flapping)
CREATE INDEX transitions_event_at ON transitions (event, at);

CREATE TRIGGER transitions_append_only_update BEFORE UPDATE ON transitions
BEGIN SELECT RAISE(ABORT, 'the transition log is append-only'); END;
-- The one sanctioned delete (prune): only inside a transaction holding a prune_tokens row,
-- and only of the log of a finished (or deleted) workflow.
CREATE TABLE prune_tokens (
    token TEXT PRIMARY KEY
);
CREATE TRIGGER transitions_append_only_delete BEFORE DELETE ON transitions
WHEN NOT EXISTS (SELECT 1 FROM prune_tokens)
  OR EXISTS (SELECT 1 FROM workflows WHERE id = old.workflow_id AND terminal = 0)
BEGIN SELECT RAISE(ABORT, 'the transition log is append-only'); END;

CREATE TABLE steps (
    key         TEXT PRIMARY KEY,
    workflow_id TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('executing', 'done', 'failed')),
    result      TEXT,
    error       TEXT,
    attempts    INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    finished_at REAL,
    outcome     TEXT,
    fence       INTEGER,
    compensation TEXT
);
-- a workflow's steps, in (started_at, key) pages
CREATE INDEX steps_workflow ON steps (workflow_id, started_at, key);

CREATE TABLE timers (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    due_at      REAL NOT NULL,
    event       TEXT NOT NULL,
    payload     TEXT NOT NULL,
    key         TEXT,
    every       REAL,
    keep        INTEGER NOT NULL DEFAULT 0,
    -- who scheduled it (Engine.schedule's actor); NULL: the system's own
    scheduled_by TEXT
);
CREATE INDEX timers_workflow_due ON timers (workflow_id, due_at);
-- a scheduled timer's key: one pending timer per key and workflow (scheduling replaces it)
CREATE UNIQUE INDEX timers_key ON timers (workflow_id, key) WHERE key IS NOT NULL;

CREATE TABLE inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    posted_at   REAL NOT NULL,
    consumed_at REAL,
    idempotency_key TEXT
);
CREATE INDEX inbox_pending ON inbox (workflow_id, id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX inbox_idempotency ON inbox (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- refused events (invalid-transition alert)
CREATE TABLE rejections (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    type        TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    state       TEXT NOT NULL,
    event       TEXT NOT NULL,
    code        TEXT NOT NULL,
    actor       TEXT NOT NULL,
    message     TEXT NOT NULL,
    at          REAL NOT NULL
);
-- "refusals in the last window", of every tenant or of one
CREATE INDEX rejections_at ON rejections (at);
CREATE INDEX rejections_tenant_at ON rejections (tenant, at);
-- a workflow's refusals (deleted and archived with it)
CREATE INDEX rejections_workflow ON rejections (workflow_id);
-- a workflow's inputs, consumed or not (archived and deleted with it)
CREATE INDEX inbox_workflow ON inbox (workflow_id, id);

-- workflows per (type, state, terminal), kept by triggers (/metrics, alert rules)
CREATE TABLE workflow_counts (
    type     TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    terminal INTEGER NOT NULL,
    slot     INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (type, state, terminal, slot)
) WITHOUT ROWID;
INSERT INTO workflow_counts (type, state, terminal, slot, n)
SELECT type, state, terminal, 0, count(*) FROM workflows GROUP BY type, state, terminal;

CREATE TRIGGER workflows_count_insert AFTER INSERT ON workflows
BEGIN
    INSERT INTO workflow_counts (type, state, terminal, slot, n)
    VALUES (new.type, new.state, new.terminal, 0, 1)
    ON CONFLICT (type, state, terminal, slot) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER workflows_count_update AFTER UPDATE OF type, state, terminal ON workflows
WHEN old.type IS NOT new.type OR old.state IS NOT new.state OR old.terminal IS NOT new.terminal
BEGIN
    UPDATE workflow_counts SET n = n - 1
     WHERE type = old.type AND state = old.state AND terminal = old.terminal AND slot = 0;
    INSERT INTO workflow_counts (type, state, terminal, slot, n)
    VALUES (new.type, new.state, new.terminal, 0, 1)
    ON CONFLICT (type, state, terminal, slot) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER workflows_count_delete AFTER DELETE ON workflows
BEGIN
    UPDATE workflow_counts SET n = n - 1
     WHERE type = old.type AND state = old.state AND terminal = old.terminal AND slot = 0;
END;

CREATE TABLE definitions (
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    fingerprint   TEXT    NOT NULL,
    document      TEXT    NOT NULL,
    registered_at REAL    NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE INDEX workflows_live_version ON workflows (type, machine_version) WHERE terminal = 0;

CREATE TABLE alert_states (
    fingerprint TEXT PRIMARY KEY,
    rule        TEXT NOT NULL,
    labels      TEXT NOT NULL,
    annotations TEXT NOT NULL,
    starts_at   REAL NOT NULL
);
CREATE TABLE alert_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver        TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    alert           TEXT    NOT NULL,
    created_at      REAL    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_at         REAL,
    claim           TEXT,
    delivered_at    REAL,
    dead_at         REAL,
    last_error      TEXT,
    kind            TEXT    NOT NULL DEFAULT 'alert',
    subscription    TEXT,
    order_key       TEXT,
    UNIQUE (receiver, idempotency_key)
);
CREATE INDEX alert_outbox_due ON alert_outbox (next_at) WHERE next_at IS NOT NULL;
-- a transition notification waits for the earlier ones of its (subscription, workflow)
CREATE INDEX alert_outbox_order ON alert_outbox (subscription, order_key, id)
    WHERE next_at IS NOT NULL AND order_key IS NOT NULL;

-- subscriptions: a filter of the log, a target (webhook or consumer), a durable cursor
CREATE TABLE subscriptions (
    name        TEXT    PRIMARY KEY,
    filter      TEXT    NOT NULL,
    url         TEXT,
    consumer    INTEGER NOT NULL DEFAULT 0,
    headers     TEXT,
    secret      TEXT,
    cursor      INTEGER NOT NULL DEFAULT 0,
    paused      INTEGER NOT NULL DEFAULT 0,
    created_at  REAL    NOT NULL,
    updated_at  REAL    NOT NULL
);

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
    last_error TEXT,
    -- who declared its definition; its ticks start workflows on their behalf
    created_by TEXT
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE paused = 0;

CREATE TABLE type_limits (
    type TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    refilled_at REAL NOT NULL
);

CREATE INDEX workflows_type_due ON workflows (type, next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL;

-- the W3C trace context of the last traced start or move (migration 0014_trace_context)
ALTER TABLE workflows ADD COLUMN trace TEXT;
-- prune deletes finished alert notifications past a cutoff, oldest first
CREATE INDEX alert_outbox_finished ON alert_outbox (created_at) WHERE next_at IS NULL;

-- the ids of pruned workflows, never started again (migration 0016_pruned_ids)
CREATE TABLE pruned_ids (
    id        TEXT PRIMARY KEY,
    tenant    TEXT NOT NULL,
    type      TEXT NOT NULL,
    pruned_at REAL NOT NULL
);
CREATE INDEX pruned_ids_at ON pruned_ids (pruned_at, id);

-- a child workflow's parent and its key among the parent's children (migration 0019_children)
ALTER TABLE workflows ADD COLUMN parent_id TEXT;
ALTER TABLE workflows ADD COLUMN parent_key TEXT;
-- whether it ever started a child (its end then cancels the live ones)
ALTER TABLE workflows ADD COLUMN has_children INTEGER NOT NULL DEFAULT 0;
-- a parent's children in id order, and the live ones (what an ended parent cancels)
CREATE INDEX workflows_children ON workflows (parent_id, id) WHERE parent_id IS NOT NULL;
CREATE INDEX workflows_live_children ON workflows (parent_id, id)
    WHERE parent_id IS NOT NULL AND terminal = 0;

-- context fields a workflow type indexes, by (name, value) (migration 0022_search_attributes)
CREATE TABLE search_attributes (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT,
    PRIMARY KEY (workflow_id, name)
) WITHOUT ROWID;
CREATE INDEX search_attributes_value ON search_attributes (name, value, workflow_id);
