-- 0021_search_attributes: context fields a workflow type indexes (issue 28, search attributes).
--   search_attributes  one row per (workflow, declared attribute): its value as canonical
--                      text (engine/search.py), written in the transaction of the workflow's
--                      creation or of the transition that changed it; value NULL: the field
--                      no longer holds an indexable value (matched by no filter). Deleted
--                      with the workflow by prune.
--   search_attributes_value  a filter name = value reads one range of it.

CREATE TABLE search_attributes (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT,
    PRIMARY KEY (workflow_id, name)
);
CREATE INDEX search_attributes_value ON search_attributes (name, value, workflow_id);
