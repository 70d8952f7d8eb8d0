-- 0015_pruned_ids: the id of every workflow prune deleted, kept after it (a tombstone). A
-- start of that id (and so a retried start with the idempotency key it derives from) is
-- refused (workflow_pruned) instead of creating a new workflow that would run its steps again
-- under the same keys. Prune writes them in the transaction of its delete, import removes the
-- one of a workflow it restores, prune --pruned-ids-older-than deletes old ones.
CREATE TABLE pruned_ids (
    id        TEXT PRIMARY KEY,
    tenant    TEXT NOT NULL,
    type      TEXT NOT NULL,
    pruned_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX pruned_ids_at ON pruned_ids (pruned_at, id);
-- Checked after the row is inserted, by a query with its own snapshot: a start that waited on
-- the row a prune was deleting sees that prune's tombstone once it committed (a check in the
-- start's own statement would not, and would create the workflow again).
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
