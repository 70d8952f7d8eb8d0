-- The whole schema as the migrations leave it (checked by tests/migration).
-- Times are epoch seconds as DOUBLE PRECISION (the store API speaks floats); JSON is JSONB.

CREATE TABLE workflows (
    id               TEXT PRIMARY KEY,
    type             TEXT             NOT NULL,
    machine_version  INTEGER          NOT NULL,
    state            TEXT             NOT NULL,
    context          JSONB            NOT NULL,
    version          INTEGER          NOT NULL,
    attempts         INTEGER          NOT NULL DEFAULT 0,
    terminal         BOOLEAN          NOT NULL DEFAULT FALSE,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    state_entered_at DOUBLE PRECISION NOT NULL,
    next_due_at      DOUBLE PRECISION,
    lease_owner      TEXT,
    lease_expires_at DOUBLE PRECISION,
    last_error       TEXT,
    cancel_requested TEXT,
    progress         JSONB,
    tenant           TEXT             NOT NULL DEFAULT 'default',
    fence            BIGINT           NOT NULL DEFAULT 0,
    total_attempts   INTEGER          NOT NULL DEFAULT 0,
    cancel_actor     TEXT,
    cancel_at        DOUBLE PRECISION,
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
-- the workers' claim: due, unleased and live only (the predicate claim_due repeats)
CREATE INDEX workflows_due ON workflows (next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL AND NOT terminal;
CREATE INDEX workflows_lease ON workflows (lease_expires_at)
    WHERE lease_owner IS NOT NULL;
-- workflows whose retry counter is not 0 (retry flapping), in listing order
CREATE INDEX workflows_retrying ON workflows (state_entered_at, id) WHERE attempts > 0;

CREATE TABLE transitions (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id   TEXT             NOT NULL,
    version       INTEGER          NOT NULL,
    from_state    TEXT,
    to_state      TEXT             NOT NULL,
    event         TEXT             NOT NULL,
    payload       JSONB            NOT NULL,
    actor         TEXT             NOT NULL,
    context_patch JSONB,
    at            DOUBLE PRECISION NOT NULL,
    idempotency_key TEXT,
    messages      JSONB,
    -- "history of one workflow"; also makes a doubled transition impossible
    CONSTRAINT transitions_workflow_version UNIQUE (workflow_id, version)
);

-- a client's idempotency key: one transition per key and workflow
CREATE UNIQUE INDEX transitions_idempotency ON transitions (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- recent transitions of some events (retry flapping)
CREATE INDEX transitions_event_at ON transitions (event, at);

-- The one sanctioned delete (prune): only in a transaction that set statewright.prune, and
-- only of the log of a finished (or deleted) workflow.
CREATE FUNCTION statewright_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('statewright.prune', true) = 'on'
       AND NOT EXISTS (SELECT 1 FROM workflows WHERE id = OLD.workflow_id AND NOT terminal) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the transition log is append-only' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER transitions_append_only_update BEFORE UPDATE ON transitions
    FOR EACH ROW EXECUTE FUNCTION statewright_append_only();
CREATE TRIGGER transitions_append_only_delete BEFORE DELETE ON transitions
    FOR EACH ROW EXECUTE FUNCTION statewright_append_only();
-- TRUNCATE skips row triggers: refuse it too.
CREATE TRIGGER transitions_append_only_truncate BEFORE TRUNCATE ON transitions
    FOR EACH STATEMENT EXECUTE FUNCTION statewright_append_only();

CREATE TABLE steps (
    key         TEXT PRIMARY KEY,
    workflow_id TEXT             NOT NULL,
    step        TEXT             NOT NULL,
    status      TEXT             NOT NULL CHECK (status IN ('executing', 'done', 'failed')),
    result      JSONB,
    error       TEXT,
    attempts    INTEGER          NOT NULL,
    started_at  DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    outcome     TEXT,
    fence       BIGINT,
    compensation TEXT
);
-- a workflow's steps, in (started_at, key) pages
CREATE INDEX steps_workflow ON steps (workflow_id, started_at, key);

CREATE TABLE timers (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id TEXT             NOT NULL,
    due_at      DOUBLE PRECISION NOT NULL,
    event       TEXT             NOT NULL,
    payload     JSONB            NOT NULL,
    key         TEXT,
    every       DOUBLE PRECISION,
    keep        BOOLEAN          NOT NULL DEFAULT FALSE,
    -- who scheduled it (Engine.schedule's actor); NULL: the system's own
    scheduled_by TEXT
);
CREATE INDEX timers_workflow_due ON timers (workflow_id, due_at);
-- a scheduled timer's key: one pending timer per key and workflow (scheduling replaces it)
CREATE UNIQUE INDEX timers_key ON timers (workflow_id, key) WHERE key IS NOT NULL;

CREATE TABLE inbox (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id TEXT             NOT NULL,
    name        TEXT             NOT NULL,
    payload     JSONB            NOT NULL,
    posted_at   DOUBLE PRECISION NOT NULL,
    consumed_at DOUBLE PRECISION,
    idempotency_key TEXT
);
CREATE INDEX inbox_pending ON inbox (workflow_id, id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX inbox_idempotency ON inbox (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- refused events (invalid-transition alert)
CREATE TABLE rejections (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id TEXT             NOT NULL,
    type        TEXT             NOT NULL,
    tenant      TEXT             NOT NULL,
    state       TEXT             NOT NULL,
    event       TEXT             NOT NULL,
    code        TEXT             NOT NULL,
    actor       TEXT             NOT NULL,
    message     TEXT             NOT NULL,
    at          DOUBLE PRECISION NOT NULL
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
    terminal BOOLEAN NOT NULL,
    slot     INTEGER NOT NULL,
    n        BIGINT  NOT NULL,
    PRIMARY KEY (type, state, terminal, slot)
);
INSERT INTO workflow_counts (type, state, terminal, slot, n)
SELECT type, state, terminal, 0, count(*) FROM workflows GROUP BY type, state, terminal;

-- Inserts (a start, a bulk COPY): one statement-level upsert of the inserted rows' groups.
CREATE FUNCTION statewright_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_counts AS c (type, state, terminal, slot, n)
    SELECT type, state, terminal, pg_backend_pid() % 1024, count(*)
      FROM inserted GROUP BY type, state, terminal ORDER BY type, state, terminal
    ON CONFLICT (type, state, terminal, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_count_insert AFTER INSERT ON workflows
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION statewright_count_insert();

-- A move to another group: -1 on the old one, +1 on the new one, locked in key order (so two
-- writers sharing a slot cannot deadlock on one move each).
CREATE FUNCTION statewright_count_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_counts AS c (type, state, terminal, slot, n)
    SELECT k.type, k.state, k.terminal, pg_backend_pid() % 1024, k.n
      FROM (VALUES (OLD.type, OLD.state, OLD.terminal, -1),
                   (NEW.type, NEW.state, NEW.terminal, 1)) AS k (type, state, terminal, n)
     ORDER BY k.type, k.state, k.terminal
    ON CONFLICT (type, state, terminal, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_count_update AFTER UPDATE OF type, state, terminal ON workflows
    FOR EACH ROW
    WHEN (OLD.type IS DISTINCT FROM NEW.type OR OLD.state IS DISTINCT FROM NEW.state
          OR OLD.terminal IS DISTINCT FROM NEW.terminal)
    EXECUTE FUNCTION statewright_count_move();

CREATE FUNCTION statewright_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_counts AS c (type, state, terminal, slot, n)
    SELECT type, state, terminal, pg_backend_pid() % 1024, -count(*)
      FROM deleted GROUP BY type, state, terminal ORDER BY type, state, terminal
    ON CONFLICT (type, state, terminal, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_count_delete AFTER DELETE ON workflows
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION statewright_count_delete();

CREATE TABLE definitions (
    name          TEXT             NOT NULL,
    version       INTEGER          NOT NULL,
    fingerprint   TEXT             NOT NULL,
    document      JSONB            NOT NULL,
    registered_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE INDEX workflows_live_version ON workflows (type, machine_version) WHERE NOT terminal;

CREATE TABLE alert_states (
    fingerprint TEXT             PRIMARY KEY,
    rule        TEXT             NOT NULL,
    labels      JSONB            NOT NULL,
    annotations JSONB            NOT NULL,
    starts_at   DOUBLE PRECISION NOT NULL
);
CREATE TABLE alert_outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    receiver        TEXT             NOT NULL,
    fingerprint     TEXT             NOT NULL,
    status          TEXT             NOT NULL,
    idempotency_key TEXT             NOT NULL,
    alert           JSONB            NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    attempts        INTEGER          NOT NULL DEFAULT 0,
    next_at         DOUBLE PRECISION,
    claim           TEXT,
    delivered_at    DOUBLE PRECISION,
    dead_at         DOUBLE PRECISION,
    last_error      TEXT,
    kind            TEXT             NOT NULL DEFAULT 'alert',
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
    filter      JSONB   NOT NULL,
    url         TEXT,
    consumer    BOOLEAN NOT NULL DEFAULT false,
    headers     JSONB,
    secret      TEXT,
    cursor      BIGINT  NOT NULL DEFAULT 0,
    paused      BOOLEAN NOT NULL DEFAULT false,
    created_at  DOUBLE PRECISION NOT NULL,
    updated_at  DOUBLE PRECISION NOT NULL
);


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
    last_error TEXT,
    -- who declared its definition; its ticks start workflows on their behalf
    created_by TEXT
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;

CREATE TABLE type_limits (
    type TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at DOUBLE PRECISION NOT NULL
);

CREATE INDEX workflows_type_due ON workflows (type, next_due_at)
    WHERE next_due_at IS NOT NULL AND lease_owner IS NULL;

-- the W3C trace context of the last traced start or move (migration 0013_trace_context)
ALTER TABLE workflows ADD COLUMN trace TEXT;
-- prune deletes finished alert notifications past a cutoff, oldest first
CREATE INDEX alert_outbox_finished ON alert_outbox (created_at) WHERE next_at IS NULL;

-- the ids of pruned workflows, never started again (migration 0015_pruned_ids)
CREATE TABLE pruned_ids (
    id        TEXT PRIMARY KEY,
    tenant    TEXT NOT NULL,
    type      TEXT NOT NULL,
    pruned_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX pruned_ids_at ON pruned_ids (pruned_at, id);
CREATE OR REPLACE FUNCTION statewright_refuse_pruned_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pruned_ids WHERE id = NEW.id) THEN
        RAISE EXCEPTION 'workflow % was pruned: its id is not used again', NEW.id
            USING ERRCODE = 'SWPRU';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER workflows_refuse_pruned_id AFTER INSERT ON workflows
    FOR EACH ROW EXECUTE FUNCTION statewright_refuse_pruned_id();

-- a child workflow's parent and its key among the parent's children (migration 0018_children)
ALTER TABLE workflows ADD COLUMN parent_id TEXT;
ALTER TABLE workflows ADD COLUMN parent_key TEXT;
-- whether it ever started a child (its end then cancels the live ones)
ALTER TABLE workflows ADD COLUMN has_children BOOLEAN NOT NULL DEFAULT false;
-- a parent's children in id order, and the live ones (what an ended parent cancels)
CREATE INDEX workflows_children ON workflows (parent_id, id) WHERE parent_id IS NOT NULL;
CREATE INDEX workflows_live_children ON workflows (parent_id, id)
    WHERE parent_id IS NOT NULL AND NOT terminal;

-- context fields a workflow type indexes, by (name, value) (migration 0021_search_attributes)
CREATE TABLE search_attributes (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT,
    PRIMARY KEY (workflow_id, name)
);
CREATE INDEX search_attributes_value ON search_attributes (name, value, workflow_id);
