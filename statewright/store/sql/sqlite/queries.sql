-- name: get_workflow
-- One workflow row by id.
SELECT * FROM workflows WHERE id = :id;

-- name: insert_workflow
-- Create a workflow row at version 1; a duplicate id is left alone (idempotent start).
INSERT INTO workflows (id, type, machine_version, state, context, version, attempts, terminal,
                       created_at, updated_at, state_entered_at, next_due_at, tenant)
VALUES (:id, :type, :machine_version, :state, :context, 1, 0, :terminal,
        :at, :at, :at, :next_due_at, :tenant)
ON CONFLICT (id) DO NOTHING;

-- name: append_transition
-- Append one entry to the transition log.
INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                         context_patch, at)
VALUES (:workflow_id, :version, :from_state, :to_state, :event, :payload, :actor,
        :context_patch, :at);

-- name: cas_update_workflow
-- Move the row to its new state if and only if it is still at the expected version.
UPDATE workflows
   SET state = :to_state, context = :context, version = version + 1, attempts = :attempts,
       terminal = :terminal, updated_at = :at,
       state_entered_at = CASE WHEN state = :to_state THEN state_entered_at ELSE :at END,
       next_due_at = :run_at, last_error = :last_error,
       cancel_requested = CASE WHEN :terminal THEN NULL ELSE cancel_requested END,
       progress = CASE WHEN state = :to_state THEN progress ELSE NULL END,
       lease_owner = CASE WHEN :release_lease THEN NULL ELSE lease_owner END,
       lease_expires_at = CASE WHEN :release_lease THEN NULL ELSE lease_expires_at END
 WHERE id = :id AND version = :expected_version;

-- name: refresh_next_due
-- next_due_at = the earlier of the handler's run time and the first pending timer.
UPDATE workflows
   SET next_due_at = (SELECT min(t) FROM (SELECT :run_at AS t
                                          UNION ALL
                                          SELECT min(due_at) FROM timers
                                           WHERE workflow_id = :id))
 WHERE id = :id;

-- name: next_due_of
-- A workflow's next due time (after its timers changed).
SELECT next_due_at FROM workflows WHERE id = :id;

-- name: version_of
-- The current version of a workflow (for conflict reports).
SELECT version FROM workflows WHERE id = :id;

-- name: history
-- One workflow's log in version order.
SELECT * FROM transitions WHERE workflow_id = :id AND version > :after ORDER BY version
LIMIT :limit;

-- name: transitions_since
-- The global log after a cursor, in commit order (of one tenant's workflows when given).
SELECT * FROM transitions
 WHERE seq > :seq
   AND (:tenant IS NULL OR workflow_id IN (SELECT id FROM workflows WHERE tenant = :tenant))
 ORDER BY seq LIMIT :limit;

-- name: count_by_state
-- Workflows per (type, state), of one tenant and entered in a time range when given.
SELECT type, state, count(*) AS n FROM workflows
 WHERE (:terminal IS NULL OR terminal = :terminal) AND (:tenant IS NULL OR tenant = :tenant)
   AND (:after IS NULL OR state_entered_at >= :after)
   AND (:before IS NULL OR state_entered_at < :before)
 GROUP BY type, state ORDER BY type, state;

-- name: live_event_counts
-- How often each live workflow took some events since a time (retry flapping).
SELECT w.id AS workflow_id, w.type, t.event, count(*) AS n
  FROM workflows w JOIN transitions t ON t.workflow_id = w.id
 WHERE w.terminal = 0 AND t.at >= :since
   AND t.event IN (SELECT value FROM json_each(:events))
   AND (:tenant IS NULL OR w.tenant = :tenant)
 GROUP BY w.id, w.type, t.event ORDER BY w.id, t.event;

-- name: claim_due
-- Lease the due, unleased workflows, earliest first.
UPDATE workflows SET lease_owner = :worker, lease_expires_at = :until
 WHERE id IN (SELECT id FROM workflows
               WHERE next_due_at IS NOT NULL AND next_due_at <= :now AND lease_owner IS NULL
                 AND terminal = 0
               ORDER BY next_due_at LIMIT :limit)
RETURNING *;

-- name: renew_leases
-- Extend a worker's leases (heartbeat).
UPDATE workflows SET lease_expires_at = :until
 WHERE lease_owner = :worker AND id IN (SELECT value FROM json_each(:ids));

-- name: release_lease
-- Give a lease back.
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE id = :id AND lease_owner = :worker;

-- name: defer_workflow
-- Record a failed attempt without a transition, release the lease; pending timers still count.
UPDATE workflows
   SET attempts = :attempts, last_error = :last_error, updated_at = :at,
       lease_owner = NULL, lease_expires_at = NULL,
       next_due_at = (SELECT min(t) FROM (SELECT :next_due_at AS t
                                          UNION ALL
                                          SELECT min(due_at) FROM timers
                                           WHERE workflow_id = :id))
 WHERE id = :id AND version = :expected_version;

-- name: expired_leases
-- Leases whose holder stopped renewing them.
SELECT * FROM workflows WHERE lease_owner IS NOT NULL AND lease_expires_at < :now
 ORDER BY lease_expires_at LIMIT :limit;

-- name: leased_by
-- The workflows one worker holds.
SELECT * FROM workflows WHERE lease_owner = :owner ORDER BY id;

-- name: lease_owners
-- Workers that hold leases.
SELECT DISTINCT lease_owner FROM workflows WHERE lease_owner IS NOT NULL;

-- name: break_leases
-- Clear every lease of one owner.
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = :owner;

-- name: break_leases_of
-- Clear the leases of one owner on some workflows.
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE lease_owner = :owner AND id IN (SELECT value FROM json_each(:ids));

-- name: timers
-- A workflow's pending timers, earliest first.
SELECT * FROM timers WHERE workflow_id = :id ORDER BY due_at, id;

-- name: insert_timer
-- Create a durable timer.
INSERT INTO timers (workflow_id, due_at, event, payload) VALUES (:id, :due_at, :event, :payload);

-- name: delete_timers
-- Cancel all of a workflow's timers (it left the state that set them).
DELETE FROM timers WHERE workflow_id = :id;

-- name: delete_timer
-- Consume one fired timer.
DELETE FROM timers WHERE id = :timer_id AND workflow_id = :id;

-- name: get_step
-- One step ledger entry.
SELECT * FROM steps WHERE key = :key;

-- name: insert_step
-- Record a step as executing before its action runs.
INSERT INTO steps (key, workflow_id, step, status, attempts, started_at)
VALUES (:key, :workflow_id, :step, 'executing', 1, :at);

-- name: restart_step
-- A step found executing or failed is being run again.
UPDATE steps SET status = 'executing', attempts = attempts + 1, started_at = :at,
                 finished_at = NULL, error = NULL
 WHERE key = :key;

-- name: finish_step
-- Record a step's outcome.
UPDATE steps SET status = :status, result = :result, error = :error, finished_at = :at
 WHERE key = :key;

-- name: steps
-- A workflow's step ledger.
SELECT * FROM steps WHERE workflow_id = :id ORDER BY started_at, key;

-- name: post_input
-- Append an external input to a workflow's inbox.
INSERT INTO inbox (workflow_id, name, payload, posted_at) VALUES (:id, :name, :payload, :at)
RETURNING *;

-- name: next_input
-- The oldest unconsumed input, optionally of one name.
SELECT * FROM inbox WHERE workflow_id = :id AND consumed_at IS NULL
   AND (:name IS NULL OR name = :name)
 ORDER BY id LIMIT 1;

-- name: consume_input
-- Mark an input consumed, once.
UPDATE inbox SET consumed_at = :at WHERE id = :item_id AND consumed_at IS NULL;

-- name: request_cancel
-- Flag a cancel request on a live workflow.
UPDATE workflows SET cancel_requested = :reason, updated_at = :at
 WHERE id = :id AND terminal = 0;

-- name: cancel_requests
-- Pending cancel requests among some workflows.
SELECT id, cancel_requested FROM workflows
 WHERE cancel_requested IS NOT NULL AND id IN (SELECT value FROM json_each(:ids));

-- name: record_progress
-- The latest progress report of a workflow's running step.
UPDATE workflows SET progress = :progress WHERE id = :id;

-- name: record_rejection
-- Log an event the engine refused.
INSERT INTO rejections (workflow_id, type, tenant, state, event, code, actor, message, at)
VALUES (:workflow_id, :type, :tenant, :state, :event, :code, :actor, :message, :at);

-- name: count_rejections
-- Refused events per (type, code) since a time, of one tenant when given.
SELECT type, code, count(*) AS n FROM rejections
 WHERE at >= :since AND (:tenant IS NULL OR tenant = :tenant)
 GROUP BY type, code ORDER BY type, code;

-- name: rejections
-- The latest refused events since a time, newest first.
SELECT * FROM rejections
 WHERE at >= :since AND (:tenant IS NULL OR tenant = :tenant)
 ORDER BY seq DESC LIMIT :limit;
