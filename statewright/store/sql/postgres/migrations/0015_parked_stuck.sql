-- 0015_parked_stuck: a parked workflow counts as stuck from the moment it parks, so the stuck
-- listing reads each (type, state)'s parked workflows in its order (state_entered_at, id)
-- besides the range of those past the threshold; the parked reason rides along for the
-- counts by reason.
DROP INDEX workflows_parked;
CREATE INDEX workflows_parked ON workflows (type, state, state_entered_at, id, parked)
    WHERE parked IS NOT NULL;
