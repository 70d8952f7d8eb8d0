-- 0007_flat_cost: what every read the product runs needs to cost the same at 1,000 workflows
-- and at 1,000,000 (issue 13).
--   transitions_event_at   recent transitions of some events (retry flapping): a range per event
--   workflows_retrying     workflows whose retry counter is not 0 (few rows: a partial index),
--                          in listing order
--   workflow_counts        workflows per (type, state, terminal), kept by triggers in the
--                          transaction that changes them: /metrics and the alert rules read it
--                          instead of counting every row. Each backend adds to its own slot
--                          (pg_backend_pid() % 1024), so concurrent writers do not queue on one
--                          counter row; readers sum the slots.

CREATE INDEX transitions_event_at ON transitions (event, at);
CREATE INDEX workflows_retrying ON workflows (state_entered_at, id) WHERE attempts > 0;

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
