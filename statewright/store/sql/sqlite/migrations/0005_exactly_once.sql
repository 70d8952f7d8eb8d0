-- 0005_exactly_once: what the runtime needs to run user code exactly once.
--   workflows.fence           fencing token: grows with every claim; a worker's writes carry it
--   workflows.total_attempts  failures over the workflow's whole life (a budget that never resets)
--   workflows.cancel_*        a cancel request as columns (it was a JSON string in
--                             cancel_requested, which now holds the reason alone)
--   workflows.parked          why a workflow waits for an operator (NULL: it does not)
--   transitions/inbox.idempotency_key   a client's key, unique per workflow
--   steps.outcome             of a failed step: not_applied (safe to run again) or unknown
--   steps.fence               the claim that ran the step's latest attempt

ALTER TABLE workflows ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN total_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN cancel_actor TEXT;
ALTER TABLE workflows ADD COLUMN cancel_at REAL;
ALTER TABLE workflows ADD COLUMN cancel_version INTEGER;
ALTER TABLE workflows ADD COLUMN cancel_key TEXT;
ALTER TABLE workflows ADD COLUMN parked TEXT;

-- Requests written as {"reason", "actor", "at", "v"} move into the columns (every SET reads
-- the old values); a plain string already is a reason.
UPDATE workflows
   SET cancel_actor = json_extract(cancel_requested, '$.actor'),
       cancel_at = json_extract(cancel_requested, '$.at'),
       cancel_version = json_extract(cancel_requested, '$.v'),
       cancel_requested = json_extract(cancel_requested, '$.reason')
 WHERE cancel_requested IS NOT NULL AND json_valid(cancel_requested)
   AND json_type(cancel_requested, '$.reason') = 'text';

ALTER TABLE transitions ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX transitions_idempotency ON transitions (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE inbox ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX inbox_idempotency ON inbox (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE steps ADD COLUMN outcome TEXT;
ALTER TABLE steps ADD COLUMN fence INTEGER;
