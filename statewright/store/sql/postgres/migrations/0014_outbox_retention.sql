-- 0014_outbox_retention: prune deletes delivered and dead-lettered alert notifications past
-- a cutoff, oldest first, from this index (rows still due keep next_at).
CREATE INDEX alert_outbox_finished ON alert_outbox (created_at) WHERE next_at IS NULL;
