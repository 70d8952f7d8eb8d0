-- 0016_pruned_ids: the id of every workflow prune deleted, kept after it (a tombstone). A
-- start of that id (and so a retried start with the idempotency key it derives from) is
-- refused (workflow_pruned) instead of creating a new workflow that would run its steps again
-- under the same keys. Prune writes them in the transaction of its delete, import removes the
-- one of a workflow it restores, prune --pruned-ids-older-than deletes old ones.
CREATE TABLE pruned_ids (
    id        TEXT PRIMARY KEY,
    tenant    TEXT NOT NULL,
    type      TEXT NOT NULL,
    pruned_at REAL NOT NULL
);
CREATE INDEX pruned_ids_at ON pruned_ids (pruned_at, id);
