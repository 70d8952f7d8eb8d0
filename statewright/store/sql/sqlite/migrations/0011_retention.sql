-- 0011_retention: the one sanctioned delete of the log. Prune inserts a row into
-- prune_tokens, deletes finished workflows whole, and removes the row, all in one transaction
-- (no other connection ever sees a token). The delete trigger refuses any other delete, and
-- even prune's of the log of a live workflow; updates stay refused always. (Main-schema
-- triggers cannot read TEMP tables: the token table lives in the main schema.)
CREATE TABLE prune_tokens (
    token TEXT PRIMARY KEY
);
DROP TRIGGER transitions_append_only_delete;
CREATE TRIGGER transitions_append_only_delete BEFORE DELETE ON transitions
WHEN NOT EXISTS (SELECT 1 FROM prune_tokens)
  OR EXISTS (SELECT 1 FROM workflows WHERE id = old.workflow_id AND terminal = 0)
BEGIN SELECT RAISE(ABORT, 'the transition log is append-only'); END;
-- a workflow's refusals (deleted and archived with it)
CREATE INDEX rejections_workflow ON rejections (workflow_id);
-- a workflow's inputs, consumed or not (archived and deleted with it)
CREATE INDEX inbox_workflow ON inbox (workflow_id, id);
