-- 0006_paging_indexes: every listing is a range of one index, in the listing's own order
-- (state_entered_at, id), so keyset pages cost what the first page does; stuck and parked
-- counts read indexes only.
--   workflows_state_age, workflows_tenant   gain id: the order is total, pages are exact
--   workflows_state                         listings by state without a type
--   workflows_terminal_age                  live or ended workflows (and, merged, all)
--   workflows_parked                        parked counts (few rows: a partial index)
--   steps_workflow                          a workflow's steps in (started_at, key) pages

DROP INDEX workflows_state_age;
CREATE INDEX workflows_state_age ON workflows (type, state, state_entered_at, id);
DROP INDEX workflows_tenant;
CREATE INDEX workflows_tenant ON workflows (tenant, state_entered_at, id);
CREATE INDEX workflows_state ON workflows (state, state_entered_at, id);
CREATE INDEX workflows_terminal_age ON workflows (terminal, state_entered_at, id);
CREATE INDEX workflows_parked ON workflows (type, state) WHERE parked IS NOT NULL;

DROP INDEX steps_workflow;
CREATE INDEX steps_workflow ON steps (workflow_id, started_at, key);
