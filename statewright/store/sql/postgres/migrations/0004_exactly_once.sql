-- 0004_exactly_once: what the runtime needs to run user code exactly once.
--   workflows.fence           fencing token: grows with every claim; a worker's writes carry it
--   workflows.total_attempts  failures over the workflow's whole life (a budget that never resets)
--   workflows.cancel_*        a cancel request as columns (it was a JSON string in
--                             cancel_requested, which now holds the reason alone)
--   workflows.parked          why a workflow waits for an operator (NULL: it does not)
--   transitions/inbox.idempotency_key   a client's key, unique per workflow
--   steps.outcome             of a failed step: not_applied (safe to run again) or unknown
--   steps.fence               the claim that ran the step's latest attempt

ALTER TABLE workflows ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN total_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN cancel_actor TEXT;
ALTER TABLE workflows ADD COLUMN cancel_at DOUBLE PRECISION;
ALTER TABLE workflows ADD COLUMN cancel_version INTEGER;
ALTER TABLE workflows ADD COLUMN cancel_key TEXT;
ALTER TABLE workflows ADD COLUMN parked TEXT;

-- Requests written as {"reason", "actor", "at", "v"} move into the columns; a plain string
-- already is a reason. (A string that is not JSON is left alone by the CASE.)
CREATE FUNCTION pg_temp.statewright_json(t text) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN t::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
UPDATE workflows w
   SET cancel_actor = j.doc ->> 'actor',
       cancel_at = CASE WHEN jsonb_typeof(j.doc -> 'at') = 'number'
                        THEN (j.doc ->> 'at')::float8 END,
       cancel_version = CASE WHEN jsonb_typeof(j.doc -> 'v') = 'number'
                             THEN (j.doc ->> 'v')::numeric::integer END,
       cancel_requested = j.doc ->> 'reason'
  FROM (SELECT id, pg_temp.statewright_json(cancel_requested) AS doc
          FROM workflows WHERE cancel_requested IS NOT NULL) j
 WHERE w.id = j.id AND jsonb_typeof(j.doc) = 'object'
   AND jsonb_typeof(j.doc -> 'reason') = 'string';
DROP FUNCTION pg_temp.statewright_json(text);

ALTER TABLE transitions ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX transitions_idempotency ON transitions (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE inbox ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX inbox_idempotency ON inbox (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE steps ADD COLUMN outcome TEXT;
ALTER TABLE steps ADD COLUMN fence BIGINT;
