-- 0018_children: child workflows (issue 25).
--   workflows.parent_id   the workflow that started this one as its child; NULL: none
--   workflows.parent_key  the key it was started under (its id is <parent_id>.<parent_key>)
--   workflows.has_children whether it ever started a child (its end then cancels the live ones)
-- A parent's children in id order, and the live ones (what an ended parent cancels).

ALTER TABLE workflows ADD COLUMN parent_id TEXT;
ALTER TABLE workflows ADD COLUMN parent_key TEXT;
ALTER TABLE workflows ADD COLUMN has_children BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX workflows_children ON workflows (parent_id, id) WHERE parent_id IS NOT NULL;
CREATE INDEX workflows_live_children ON workflows (parent_id, id)
    WHERE parent_id IS NOT NULL AND NOT terminal;
