-- 0008_flat_cost: what every read the product runs needs to cost the same at 1,000 workflows
-- and at 1,000,000 (issue 13).
--   transitions_event_at   recent transitions of some events (retry flapping): a range per event
--   workflows_retrying     workflows whose retry counter is not 0 (few rows: a partial index),
--                          in listing order
--   workflow_counts        workflows per (type, state, terminal), kept by triggers in the
--                          transaction that changes them: /metrics and the alert rules read it
--                          instead of counting every row (slot: always 0 on SQLite, which has
--                          one writer; PostgreSQL spreads concurrent writers over slots)

CREATE INDEX transitions_event_at ON transitions (event, at);
CREATE INDEX workflows_retrying ON workflows (state_entered_at, id) WHERE attempts > 0;

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
