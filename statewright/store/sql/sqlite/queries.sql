-- name: get_workflow
-- One workflow row by id.
SELECT * FROM workflows WHERE id = :id;

-- name: insert_workflow
-- Create a workflow row at version 1; a duplicate id is left alone (idempotent start).
INSERT INTO workflows (id, type, machine_version, state, context, version, attempts, terminal,
                       created_at, updated_at, state_entered_at, next_due_at, tenant, trace,
                       parent_id, parent_key)
VALUES (:id, :type, :machine_version, :state, :context, 1, 0, :terminal,
        :at, :at, :at, :run_at, :tenant, :trace, :parent_id, :parent_key)
ON CONFLICT (id) DO NOTHING;

-- name: parent_of_child
-- A child's create: its parent's state and lease (see NewWorkflow.parent).
SELECT state, terminal, lease_owner, fence, has_children FROM workflows WHERE id = :id;

-- name: mark_parent
-- A parent's first child: it has children from now on (its end cancels the live ones).
UPDATE workflows SET has_children = 1 WHERE id = :id;

-- name: notice_parent
-- A child's terminal transition: its parent, if it is there and live (see
-- TransitionWrite.notice), with what timer_visit reads for its next due time.
SELECT p.id, p.state, p.state_entered_at, p.terminal, p.next_due_at, p.attempts, p.parked
  FROM workflows c JOIN workflows p ON p.id = c.parent_id
 WHERE c.id = :child AND NOT p.terminal;

-- name: take_timer_key
-- Delete a workflow's pending timer of one key (a notice replaces it); its due time (as
-- PostgreSQL's take_timer_key).
DELETE FROM timers WHERE workflow_id = :id AND key = :key RETURNING due_at;

-- name: children
-- A parent's children in id order, from an id on (a page).
SELECT * FROM workflows WHERE parent_id = :parent AND id > :after ORDER BY id LIMIT :limit;

-- name: orphans
-- Live children whose parent is terminal or gone (an ended parent cancels them): those no
-- cancel request waits on with a worker (a request on a row nobody holds may wait for good),
-- after (:after_parent, :after_id) in the order of the index of live children, at most
-- :limit (a recovery round reads a page and the next round the next: an ended parent's
-- abandoned children, read every time, cannot hide the others).
SELECT c.* FROM workflows c INDEXED BY workflows_live_children
  LEFT JOIN workflows p ON p.id = c.parent_id
 WHERE c.parent_id IS NOT NULL AND c.terminal = 0
   AND (c.parent_id, c.id) > (:after_parent, :after_id)
   AND (c.cancel_requested IS NULL OR c.lease_owner IS NULL)
   AND (p.id IS NULL OR p.terminal = 1)
 ORDER BY c.parent_id, c.id LIMIT :limit;

-- name: append_transition
-- Append one entry to the transition log.
INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                         context_patch, at, idempotency_key, messages)
VALUES (:workflow_id, :version, :from_state, :to_state, :event, :payload, :actor,
        :context_patch, :at, :idempotency_key, :messages);

-- name: cas_update_workflow
-- Move the row to its new state if and only if it is still at the expected version and, for
-- a worker's write (:fence not NULL), the worker's lease still holds (fencing).
-- next_due_at is the earliest of the handler's run, the timers the write arms (:new_due) and
-- the pending timers it leaves in place, read before its timer changes run (after this
-- statement, in the same savepoint): not cleared on leaving the state (those kept, unless it
-- ends), not the one fired, not those whose key is cancelled or armed again (:drop_keys).
-- A cancel request pending on a live workflow makes it due now: a claim delivers it (the
-- writer delivers it itself too, but a writer killed first must not strand it in a state
-- without a handler).
UPDATE workflows
   SET state = :to_state, context = :context, version = version + 1, attempts = :attempts,
       total_attempts = coalesce(:total_attempts, total_attempts),
       machine_version = coalesce(:machine_version, machine_version),
       terminal = :terminal, updated_at = :at,
       state_entered_at = CASE WHEN state = :to_state THEN state_entered_at ELSE :at END,
       next_due_at = (SELECT min(t) FROM (
           SELECT :run_at AS t
           UNION ALL SELECT :new_due
           UNION ALL SELECT CASE WHEN workflows.cancel_requested IS NOT NULL AND NOT :terminal
                                 THEN :at END
           UNION ALL SELECT min(due_at) FROM timers
            WHERE workflow_id = :id
              AND NOT (:clear_timers AND (keep = 0 OR :terminal))
              AND id IS NOT :fired_timer_id
              AND (:drop_keys IS NULL OR key IS NULL
                   OR key NOT IN (SELECT value FROM json_each(:drop_keys))))),
       last_error = :last_error, parked = NULL,
       trace = coalesce(:trace, trace),
       cancel_requested = CASE WHEN :terminal THEN NULL ELSE cancel_requested END,
       cancel_actor = CASE WHEN :terminal THEN NULL ELSE cancel_actor END,
       cancel_at = CASE WHEN :terminal THEN NULL ELSE cancel_at END,
       cancel_version = CASE WHEN :terminal THEN NULL ELSE cancel_version END,
       cancel_key = CASE WHEN :terminal THEN NULL ELSE cancel_key END,
       progress = CASE WHEN state = :to_state THEN progress ELSE NULL END,
       lease_owner = CASE WHEN :release_lease THEN NULL ELSE lease_owner END,
       lease_expires_at = CASE WHEN :release_lease THEN NULL ELSE lease_expires_at END
 WHERE id = :id AND version = :expected_version
   AND (:fence IS NULL OR (lease_owner = :owner AND fence = :fence))
   AND (:require_unleased = 0 OR lease_owner IS NULL);

-- name: after_transition
-- After cas_update_workflow: the columns the writer does not know already (it has the state,
-- context, version and counters it wrote). A separate read because in SQLite a RETURNING
-- clause costs more than this whole primary-key lookup.
SELECT id, type, machine_version, created_at, state_entered_at, next_due_at, lease_owner,
       lease_expires_at, cancel_requested, cancel_actor, cancel_at, cancel_version,
       cancel_key, progress, tenant, fence, total_attempts, trace, parent_id, parent_key,
       has_children
  FROM workflows WHERE id = :id;

-- name: write_refusal
-- Why a compare-and-swap matched nothing: the row's version and lease.
SELECT version, lease_owner, fence FROM workflows WHERE id = :id;

-- name: transition_by_key
-- The log entry a client's idempotency key produced on a workflow.
SELECT * FROM transitions WHERE workflow_id = :id AND idempotency_key = :key;

-- name: consume_inputs
-- Mark inputs consumed, once (a transition or deferral consumes what its handler run took).
UPDATE inbox SET consumed_at = :at
 WHERE workflow_id = :id AND consumed_at IS NULL
   AND id IN (SELECT value FROM json_each(:ids));

-- name: refresh_next_due
-- next_due_at = the earlier of the handler's run time and the first pending timer.
UPDATE workflows
   SET next_due_at = (SELECT min(t) FROM (SELECT :run_at AS t
                                          UNION ALL
                                          SELECT min(due_at) FROM timers
                                           WHERE workflow_id = :id))
 WHERE id = :id;

-- name: version_of
-- The current version of a workflow (for conflict reports).
SELECT version FROM workflows WHERE id = :id;

-- name: fork_source
-- A fork's source: whether a worker holds it, and its latest claim's fencing token.
SELECT lease_owner, fence FROM workflows WHERE id = :id;

-- name: history
-- One workflow's log in version order.
SELECT * FROM transitions WHERE workflow_id = :id AND version > :after ORDER BY version
LIMIT :limit;

-- The log after a cursor, counts by state, recent events and rejections are built from the
-- filters given by statewright/store/sqlbuild.py.

-- name: workflow_counts
-- Workflows per (type, state, terminal), kept by the triggers of migration 0008: no row of
-- workflows is read.
SELECT type, state, terminal, sum(n) AS n FROM workflow_counts
 GROUP BY type, state, terminal HAVING sum(n) <> 0 ORDER BY type, state, terminal;

-- name: claim_due
-- Lease the due, unleased workflows, earliest first; each claim gets a new fencing token.
-- The partial index is named: without statistics SQLite would rather read every live
-- workflow in workflows_terminal_age (an equality on terminal) than a range of it.
UPDATE workflows SET lease_owner = :worker, lease_expires_at = :until, fence = fence + 1
 WHERE id IN (SELECT id FROM workflows INDEXED BY workflows_due
               WHERE next_due_at IS NOT NULL AND next_due_at <= :now AND lease_owner IS NULL
                 AND terminal = 0
               ORDER BY next_due_at LIMIT :limit)
RETURNING *;

-- name: renew_leases
-- Extend a worker's leases (heartbeat): only those it still holds under the same claim.
UPDATE workflows SET lease_expires_at = :until
 WHERE lease_owner = :worker
   AND id IN (SELECT json_extract(value, '$[0]') FROM json_each(:held))
   AND fence = (SELECT json_extract(value, '$[1]') FROM json_each(:held)
                 WHERE json_extract(value, '$[0]') = workflows.id)
RETURNING id;

-- name: release_lease
-- Give a lease back (only the same claim's).
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE id = :id AND lease_owner = :worker AND fence = :fence;

-- name: defer_workflow
-- Keep the state: counters, error, parked reason, next due time (merged with the pending
-- timers, and now when a suspended wait's input is already there: :wake); release the lease.
-- Fenced like a transition.
UPDATE workflows
   SET attempts = :attempts, total_attempts = coalesce(:total_attempts, total_attempts),
       last_error = :last_error, parked = :parked, updated_at = :at,
       lease_owner = NULL, lease_expires_at = NULL,
       next_due_at = (SELECT min(t) FROM (SELECT :next_due_at AS t
                                          UNION ALL
                                          SELECT min(due_at) FROM timers
                                           WHERE workflow_id = :id
                                          UNION ALL
                                          SELECT CASE WHEN :wake THEN (
                                            SELECT :at FROM inbox
                                             WHERE workflow_id = :id AND consumed_at IS NULL
                                               AND (:wake_name IS NULL OR name = :wake_name)
                                               AND id NOT IN (SELECT value
                                                                FROM json_each(:wake_skip))
                                             LIMIT 1) END))
 WHERE id = :id AND version = :expected_version
   AND (:fence IS NULL OR (lease_owner = :owner AND fence = :fence));

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
-- Clear every lease of one owner (expired before a time, when given).
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE lease_owner = :owner AND (:expired_before IS NULL OR lease_expires_at < :expired_before);

-- name: break_leases_of
-- Clear the leases of one owner on some workflows (expired before a time, when given).
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE lease_owner = :owner AND id IN (SELECT value FROM json_each(:ids))
   AND (:expired_before IS NULL OR lease_expires_at < :expired_before);

-- name: live_versions_between
-- Live workflows of one type on machine versions strictly between two (a gap between the
-- registered versions): one range of workflows_live_version.
SELECT machine_version, count(*) AS n FROM workflows INDEXED BY workflows_live_version
 WHERE type = :type AND terminal = 0 AND machine_version > :lo AND machine_version < :hi
 GROUP BY machine_version ORDER BY machine_version;

-- name: add_definition
-- Record a registered machine definition unless its (name, version) has one.
INSERT OR IGNORE INTO definitions (name, version, fingerprint, document, registered_at)
VALUES (:name, :version, :fingerprint, :document, :at);

-- name: get_definition
-- The recorded definition of one machine version.
SELECT fingerprint, document FROM definitions WHERE name = :name AND version = :version;

-- name: replace_definition
-- Record an edited definition of a machine version (an edit that only adds, allowed).
UPDATE definitions SET fingerprint = :fingerprint, document = :document, registered_at = :at
 WHERE name = :name AND version = :version;

-- name: timers
-- A workflow's pending timers, earliest first.
SELECT * FROM timers WHERE workflow_id = :id ORDER BY due_at, id;

-- name: timers_page
-- A page of a workflow's pending timers, earliest first, after a (due_at, id) cursor.
SELECT * FROM timers
 WHERE workflow_id = :id AND (:after_due IS NULL OR (due_at, id) > (:after_due, :after_id))
 ORDER BY due_at, id LIMIT :limit;

-- name: insert_timer
-- Create a durable timer (a keyed one's earlier timer of the same key is deleted first).
INSERT INTO timers (workflow_id, due_at, event, payload, key, every, keep, scheduled_by)
VALUES (:id, :due_at, :event, :payload, :key, :every, :keep, :scheduled_by);

-- name: delete_timers
-- Cancel a workflow's timers as it leaves the state that set them: those not kept, or all of
-- them when it ends (:all), and the timer that fired the move (:timer_id), kept or not. Keys
-- about to be armed again are left for delete_timer_keys.
DELETE FROM timers WHERE workflow_id = :id AND (:all OR keep = 0 OR id = :timer_id);

-- name: delete_timer_keys
-- Delete a workflow's timers of some keys (cancelled, or about to be replaced).
DELETE FROM timers WHERE workflow_id = :id AND key IN (SELECT value FROM json_each(:keys));

-- name: timer_exists
-- Whether a timer read earlier is still pending (a fire consumes only the timer it read).
SELECT 1 FROM timers WHERE id = :timer_id AND workflow_id = :id;

-- name: timer_by_key
-- A workflow's pending timer of one key.
SELECT * FROM timers WHERE workflow_id = :id AND key = :key;

-- name: timer_visit
-- What scheduling a timer on its own checks and recomputes: the state visit and due time.
SELECT state, state_entered_at, terminal, next_due_at, attempts, parked
  FROM workflows WHERE id = :id;

-- name: first_timer
-- The earliest pending timer of a workflow.
SELECT min(due_at) FROM timers WHERE workflow_id = :id;

-- name: set_next_due
-- A workflow's next due time after a timer was scheduled or cancelled on its own.
UPDATE workflows SET next_due_at = :next_due_at WHERE id = :id;

-- name: delete_timer
-- Consume one fired timer.
DELETE FROM timers WHERE id = :timer_id AND workflow_id = :id;

-- name: get_step
-- One step ledger entry.
SELECT * FROM steps WHERE key = :key;

-- name: lease_holds
-- Whether a worker's lease on a workflow still holds (:fence NULL: not a worker's write).
SELECT 1 FROM workflows
 WHERE id = :workflow_id AND (:fence IS NULL OR (lease_owner = :owner AND fence = :fence));

-- name: step_open_insert
-- step_open's usual case in one statement: the step recorded executing when the workflow has
-- no pending cancel request, the lease holds (fenced as in step_begin) and the key has no
-- ledger entry yet (DO NOTHING). Nothing inserted: the caller reads why (step_open_workflow).
INSERT INTO steps (key, workflow_id, step, status, attempts, started_at, fence, compensation)
SELECT :key, id, :step, 'executing', 1, :at, :fence, :compensation
  FROM workflows
 WHERE id = :workflow_id AND cancel_requested IS NULL
   AND (:fence IS NULL OR (lease_owner = :owner AND fence = :fence))
ON CONFLICT (key) DO NOTHING;

-- name: step_open_workflow
-- For step_open, when step_open_insert inserted nothing: the workflow's pending cancel request.
SELECT cancel_requested, cancel_actor, cancel_at, cancel_version, cancel_key
  FROM workflows WHERE id = :workflow_id;

-- name: insert_done_step
-- A done step written with a new workflow (a fork's copy); an existing key is left alone.
INSERT OR IGNORE INTO steps (key, workflow_id, step, status, result, attempts, started_at,
                             finished_at)
VALUES (:key, :workflow_id, :step, 'done', :result, :attempts, :started_at, :finished_at);

-- name: insert_step
-- Record a step as executing before its action runs.
INSERT INTO steps (key, workflow_id, step, status, attempts, started_at, fence, compensation)
VALUES (:key, :workflow_id, :step, 'executing', 1, :at, :fence, :compensation);

-- name: restart_step
-- A step found executing or failed is being run again.
UPDATE steps SET status = 'executing', attempts = attempts + 1, started_at = :at,
                 finished_at = NULL, error = NULL, outcome = NULL, fence = :fence,
                 compensation = :compensation
 WHERE key = :key;

-- name: finish_step
-- Record the outcome of one attempt: only while that attempt is executing and, for a worker,
-- its lease still holds (a late writer never overwrites a newer result).
UPDATE steps SET status = :status, result = :result, error = :error, outcome = :outcome,
                 finished_at = :at
 WHERE key = :key AND status = 'executing' AND attempts = :attempt
   AND (:fence IS NULL OR EXISTS (SELECT 1 FROM workflows w
                                   WHERE w.id = steps.workflow_id AND w.lease_owner = :owner
                                     AND w.fence = :fence))
RETURNING *;

-- name: finish_carried_step
-- A step's outcome carried by a transition, in its transaction: the transition's fenced
-- compare-and-swap proved the lease, so only the attempt is checked (no RETURNING: cheaper).
UPDATE steps SET status = :status, result = :result, error = :error, outcome = :outcome,
                 finished_at = :at
 WHERE key = :key AND status = 'executing' AND attempts = :attempt;

-- name: resolve_step
-- An operator's verdict on a step whose outcome was unknown (never on a done step, never
-- while a worker holds the workflow).
UPDATE steps SET status = :status, result = :result, outcome = :outcome, error = :error,
                 finished_at = :at
 WHERE key = :key AND status <> 'done'
   AND NOT EXISTS (SELECT 1 FROM workflows w
                    WHERE w.id = steps.workflow_id AND w.lease_owner IS NOT NULL)
RETURNING *;

-- name: unresolved_steps
-- The steps of some workflows whose outcome is unknown: not done, and not known never to
-- have taken effect (found executing, or failed after the call may have reached the other
-- side). A range of steps_workflow per workflow.
SELECT * FROM steps INDEXED BY steps_workflow
 WHERE workflow_id IN (SELECT value FROM json_each(:ids)) AND status <> 'done'
   AND (outcome IS NULL OR outcome <> 'not_applied')
 ORDER BY workflow_id, started_at, key;

-- name: input_by_key
-- The input a client's idempotency key posted to a workflow.
SELECT * FROM inbox WHERE workflow_id = :id AND idempotency_key = :key;

-- name: post_input
-- Append an external input to a workflow's inbox.
INSERT INTO inbox (workflow_id, name, payload, posted_at, idempotency_key)
VALUES (:id, :name, :payload, :at, :key)
RETURNING *;

-- name: wake_for_input
-- An idle workflow (not leased, parked or backing off) in the given state becomes due now:
-- its handler runs and can take the input.
UPDATE workflows SET next_due_at = :at
 WHERE id = :id AND state = :wake_state AND terminal = 0 AND lease_owner IS NULL
   AND parked IS NULL AND attempts = 0 AND (next_due_at IS NULL OR next_due_at > :at);

-- name: next_input
-- The oldest unconsumed input, optionally of one name, other than those already taken.
SELECT * FROM inbox WHERE workflow_id = :id AND consumed_at IS NULL
   AND (:name IS NULL OR name = :name)
   AND id NOT IN (SELECT value FROM json_each(:skip))
 ORDER BY id LIMIT 1;

-- name: request_cancel
-- Record a cancel request on a live workflow (a newer one replaces it).
UPDATE workflows
   SET cancel_requested = :reason, cancel_actor = :actor, cancel_at = :at,
       cancel_version = :version, cancel_key = :key, updated_at = :at
 WHERE id = :id AND terminal = 0;

-- name: cancel_requests
-- Pending cancel requests among some workflows.
SELECT id, cancel_requested, cancel_actor, cancel_at, cancel_version, cancel_key
  FROM workflows
 WHERE cancel_requested IS NOT NULL AND id IN (SELECT value FROM json_each(:ids));

-- name: record_progress
-- The latest progress report of a workflow's running step (fenced for a worker).
UPDATE workflows SET progress = :progress
 WHERE id = :id AND (:fence IS NULL OR (lease_owner = :owner AND fence = :fence));

-- name: record_rejection
-- Log an event the engine refused.
INSERT INTO rejections (workflow_id, type, tenant, state, event, code, actor, message, at)
VALUES (:workflow_id, :type, :tenant, :state, :event, :code, :actor, :message, :at);

-- name: get_workflow_head
-- A workflow's state and terminal flag (without decoding its context).
SELECT state, terminal FROM workflows WHERE id = :id;

-- name: take_over
-- Take a lease over from a lost worker (expired before a time, when given): a new claim with
-- a new fencing token, so the lost worker's later writes are refused.
UPDATE workflows SET lease_owner = :worker, lease_expires_at = :until, fence = fence + 1
 WHERE id = :id AND lease_owner = :owner
   AND (:expired_before IS NULL OR lease_expires_at < :expired_before)
RETURNING *;

-- name: alert_states
-- The alerts firing now (a handful of rows).
SELECT fingerprint, rule, labels, annotations, starts_at FROM alert_states ORDER BY fingerprint;

-- name: alert_fire
-- Record an alert as firing unless it is already (of two evaluators, one inserts).
INSERT INTO alert_states (fingerprint, rule, labels, annotations, starts_at)
VALUES (:fingerprint, :rule, :labels, :annotations, :starts_at)
ON CONFLICT (fingerprint) DO NOTHING;

-- name: alert_resolve
-- Forget a firing alert, only the firing that started at starts_at (of two evaluators, one).
DELETE FROM alert_states WHERE fingerprint = :fingerprint AND starts_at = :starts_at;

-- name: alert_enqueue
-- A notification for one receiver, due now.
INSERT INTO alert_outbox (receiver, fingerprint, status, idempotency_key, alert, created_at, next_at)
VALUES (:receiver, :fingerprint, :status, :key, :alert, :at, :at)
ON CONFLICT (receiver, idempotency_key) DO NOTHING;

-- name: alert_claim
-- Claim due notifications until :until (one claimer at a time: SQLite has one writer).
-- A transition's notification (order_key set) waits while an earlier one of its
-- (subscription, workflow) is still due or claimed: in order per workflow.
UPDATE alert_outbox SET claim = :claim, next_at = :until
 WHERE id IN (SELECT o.id FROM alert_outbox o INDEXED BY alert_outbox_due
               WHERE o.next_at IS NOT NULL AND o.next_at <= :now
                 AND (o.order_key IS NULL
                      OR NOT EXISTS (SELECT 1 FROM alert_outbox e INDEXED BY alert_outbox_order
                                      WHERE e.subscription = o.subscription
                                        AND e.order_key = o.order_key AND e.id < o.id
                                        AND e.next_at IS NOT NULL
                                        AND e.order_key IS NOT NULL))
               ORDER BY o.next_at, o.id LIMIT :limit)
RETURNING *;

-- name: alert_delivered
-- A claimed notification was delivered (a claim that ran out and was taken changes nothing).
UPDATE alert_outbox SET delivered_at = :at, next_at = NULL, claim = NULL
 WHERE id = :nid AND claim = :claim;

-- name: alert_retry
-- A claimed notification failed: try again at :due_at.
UPDATE alert_outbox SET attempts = attempts + 1, next_at = :due_at, claim = NULL,
       last_error = :message
 WHERE id = :nid AND claim = :claim;

-- name: alert_dead
-- A claimed notification failed for the last time: dead-lettered, never tried again.
UPDATE alert_outbox SET attempts = attempts + 1, dead_at = :at, next_at = NULL, claim = NULL,
       last_error = :message
 WHERE id = :nid AND claim = :claim;

-- name: alert_outbox
-- Notifications in the order written, after id :after.
SELECT * FROM alert_outbox WHERE id > :after ORDER BY id LIMIT :limit;

-- name: schedule_put
-- Declare a schedule: a new one, or a new definition of one (its next tick recomputed).
INSERT INTO schedules (id, type, cron, timezone, catch_up, input, tenant, paused, next_at,
                       created_at, updated_at, created_by)
VALUES (:id, :type, :cron, :timezone, :catch_up, :input, :tenant, :paused, :next_at, :at, :at,
        :created_by)
ON CONFLICT (id) DO UPDATE SET type = excluded.type, cron = excluded.cron,
       timezone = excluded.timezone, catch_up = excluded.catch_up, input = excluded.input,
       tenant = excluded.tenant, paused = excluded.paused, next_at = excluded.next_at,
       updated_at = excluded.updated_at, last_error = NULL, created_by = excluded.created_by
RETURNING *;

-- name: schedule_get
-- One schedule.
SELECT * FROM schedules WHERE id = :id;

-- name: schedule_list
-- The schedules (of one tenant when given), by id.
SELECT * FROM schedules WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY id;

-- name: schedule_page
-- A page of the schedules (of one tenant when given), by id, after an id.
SELECT * FROM schedules
 WHERE (:tenant IS NULL OR tenant = :tenant) AND (:after IS NULL OR id > :after)
 ORDER BY id LIMIT :limit;

-- name: schedule_delete
-- Remove a schedule (the workflows it started stay).
DELETE FROM schedules WHERE id = :id;

-- name: schedule_due
-- Active schedules whose next tick has come.
SELECT * FROM schedules WHERE paused = 0 AND next_at <= :now ORDER BY next_at LIMIT :limit;

-- name: schedule_advance
-- Move a schedule past the ticks fired, only from the next tick the caller read (one
-- worker wins a tick; the others change nothing).
UPDATE schedules SET next_at = :next_at, last_tick = coalesce(:last_tick, last_tick),
       last_workflow_id = coalesce(:last_workflow_id, last_workflow_id),
       last_error = :message, updated_at = :at
 WHERE id = :id AND next_at = :expected_next_at AND paused = 0;

-- name: schedule_pause
-- Pause or resume a schedule (a resumed one continues from its next tick after now).
UPDATE schedules SET paused = :paused, next_at = :next_at, updated_at = :at
 WHERE id = :id
RETURNING *;

-- name: limit_bucket
-- A limited type's row (its token bucket), made on first use, read in the claim's transaction.
INSERT INTO type_limits (type, tokens, refilled_at) VALUES (:type, :burst, :now)
ON CONFLICT (type) DO UPDATE SET type = excluded.type
RETURNING tokens, refilled_at;

-- name: limit_refill
-- Keep what is left of a limited type's token bucket after a claim.
UPDATE type_limits SET tokens = :tokens, refilled_at = :refilled_at WHERE type = :type;

-- name: limit_leased
-- How many workflows of a type are leased now (lapsed leases do not count). The leases are
-- few (every worker's slots), so they are read whole from workflows_lease.
SELECT count(*) AS n FROM workflows INDEXED BY workflows_lease
 WHERE lease_owner IS NOT NULL AND lease_expires_at > :now AND type = :type;

-- name: claim_due_of_type
-- claim_due for one limited type, at most :limit (what its limits allow now).
UPDATE workflows SET lease_owner = :worker, lease_expires_at = :until, fence = fence + 1
 WHERE id IN (SELECT id FROM workflows INDEXED BY workflows_type_due
               WHERE type = :type AND next_due_at IS NOT NULL AND next_due_at <= :now
                 AND lease_owner IS NULL AND terminal = 0
               ORDER BY next_due_at LIMIT :limit)
RETURNING *;

-- name: prunable
-- Finished workflows that entered their final state before :until, oldest first, after the
-- page key (:since, :id) (prune).
SELECT id, version, state_entered_at FROM workflows
 WHERE terminal = 1 AND state_entered_at < :until AND (state_entered_at, id) > (:since, :id)
 ORDER BY state_entered_at, id LIMIT :limit;

-- name: prunable_tenant
-- The same for one tenant.
SELECT id, version, state_entered_at FROM workflows
 WHERE tenant = :tenant AND terminal = 1 AND state_entered_at < :until
   AND (state_entered_at, id) > (:since, :id)
 ORDER BY state_entered_at, id LIMIT :limit;

-- name: export_workflows
-- Whole rows of some workflows (prune's archive, import's comparison).
SELECT * FROM workflows WHERE id IN (SELECT value FROM json_each(:ids));

-- name: export_transitions
-- Their logs.
SELECT * FROM transitions WHERE workflow_id IN (SELECT value FROM json_each(:ids))
 ORDER BY workflow_id, version;

-- name: export_steps
-- Their step ledgers.
SELECT * FROM steps WHERE workflow_id IN (SELECT value FROM json_each(:ids))
 ORDER BY workflow_id, started_at, key;

-- name: export_timers
-- Their pending timers.
SELECT * FROM timers WHERE workflow_id IN (SELECT value FROM json_each(:ids))
 ORDER BY workflow_id, due_at, id;

-- name: export_inbox
-- Their inputs, consumed or not.
SELECT * FROM inbox WHERE workflow_id IN (SELECT value FROM json_each(:ids))
 ORDER BY workflow_id, id;

-- name: export_rejections
-- Their refused events.
SELECT * FROM rejections WHERE workflow_id IN (SELECT value FROM json_each(:ids))
 ORDER BY workflow_id, seq;

-- name: prune_token_add
-- Opens prune's sanctioned delete of the log (removed by the same transaction).
INSERT INTO prune_tokens (token) VALUES (:key);

-- name: prune_token_drop
-- Closes it.
DELETE FROM prune_tokens WHERE token = :key;

-- name: prune_workflow
-- Deletes one finished workflow's row, only at the version prune read (and archived), and
-- not while a child of it lives (an abandoned one: it stays until they end); its tenant and
-- type go to its tombstone.
DELETE FROM workflows WHERE id = :id AND version = :version AND terminal = 1
   AND NOT EXISTS (SELECT 1 FROM workflows c WHERE c.parent_id = :id AND c.terminal = 0)
RETURNING tenant, type;

-- name: add_pruned_id
-- A pruned workflow's tombstone: its id is not started again.
INSERT INTO pruned_ids (id, tenant, type, pruned_at) VALUES (:id, :tenant, :type, :at)
ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, type = excluded.type,
                               pruned_at = excluded.pruned_at;

-- name: is_pruned
-- Whether a workflow of this id was pruned (a start of it is refused).
SELECT 1 FROM pruned_ids WHERE id = :id;

-- name: drop_pruned_id
-- The workflow is back (imported): its id names it again.
DELETE FROM pruned_ids WHERE id = :id;

-- name: forget_pruned_ids
-- Up to :limit tombstones older than :until (of one tenant, or of all with :tenant null):
-- their ids may be started again.
DELETE FROM pruned_ids
 WHERE id IN (SELECT id FROM pruned_ids
               WHERE pruned_at < :until AND (:tenant IS NULL OR tenant = :tenant)
               ORDER BY pruned_at, id LIMIT :limit);

-- name: count_old_pruned_ids
-- Tombstones older than :until (prune's dry run).
SELECT count(*) AS n FROM pruned_ids
 WHERE pruned_at < :until AND (:tenant IS NULL OR tenant = :tenant);

-- name: prune_transitions
-- The logs of workflows prune deleted.
DELETE FROM transitions WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: prune_steps
-- Their step ledgers.
DELETE FROM steps WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: prune_timers
-- Their timers.
DELETE FROM timers WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: prune_inbox
-- Their inputs.
DELETE FROM inbox WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: prune_search_attributes
-- Their search attributes.
DELETE FROM search_attributes WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: search_attributes_of
-- A workflow's search attributes (those with a value).
SELECT name, value FROM search_attributes
 WHERE workflow_id = :id AND value IS NOT NULL ORDER BY name;

-- name: put_search_attribute
-- One search attribute of a workflow, written with its creation or transition (a NULL value:
-- the attribute is gone).
INSERT INTO search_attributes (workflow_id, name, value) VALUES (:id, :name, :value)
ON CONFLICT (workflow_id, name) DO UPDATE SET value = excluded.value;

-- name: prune_workflow_rejections
-- Their refused events.
DELETE FROM rejections WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: prune_rejections
-- Up to :limit refused events older than :until.
DELETE FROM rejections
 WHERE seq IN (SELECT seq FROM rejections WHERE at < :until ORDER BY at LIMIT :limit);

-- name: prune_rejections_tenant
-- The same for one tenant.
DELETE FROM rejections
 WHERE seq IN (SELECT seq FROM rejections WHERE tenant = :tenant AND at < :until
                ORDER BY at LIMIT :limit);

-- name: prune_alert_notifications
-- Up to :limit delivered or dead-lettered alert notifications created before :until.
DELETE FROM alert_outbox
 WHERE id IN (SELECT id FROM alert_outbox WHERE next_at IS NULL AND created_at < :until
              ORDER BY created_at LIMIT :limit);

-- name: count_old_alert_notifications
-- How many prune_alert_notifications would delete.
SELECT count(*) AS n FROM alert_outbox WHERE next_at IS NULL AND created_at < :until;

-- name: count_old_rejections
-- Refused events older than :until (prune's dry run).
SELECT count(*) AS n FROM rejections WHERE at < :until;

-- name: count_old_rejections_tenant
-- The same for one tenant.
SELECT count(*) AS n FROM rejections WHERE tenant = :tenant AND at < :until;

-- name: subscription_put
-- Declare a subscription, or change one (its cursor kept); a new one starts at :cursor, or
-- (NULL) at the end of the log.
INSERT INTO subscriptions (name, filter, url, consumer, headers, secret, cursor, paused,
                           created_at, updated_at)
VALUES (:name, :filter, :url, :consumer, :headers, :secret,
        coalesce(:cursor, (SELECT coalesce(max(seq), 0) FROM transitions)), :paused, :at, :at)
ON CONFLICT (name) DO UPDATE
   SET filter = excluded.filter, url = excluded.url, consumer = excluded.consumer,
       headers = excluded.headers, secret = excluded.secret, paused = excluded.paused,
       updated_at = excluded.updated_at;

-- name: subscription_get
SELECT * FROM subscriptions WHERE name = :name;

-- name: subscription_list
SELECT * FROM subscriptions ORDER BY name;

-- name: subscription_delete
DELETE FROM subscriptions WHERE name = :name;

-- name: subscription_pause
UPDATE subscriptions SET paused = :paused, updated_at = :at WHERE name = :name;

-- name: subscription_advance
-- Move a subscription's cursor if and only if it is still at :old (two pumps: one moves it).
UPDATE subscriptions SET cursor = :new, updated_at = :at WHERE name = :name AND cursor = :old;

-- name: subscription_enqueue
-- A subscription's notification of one transition (or message), due now.
INSERT INTO alert_outbox (receiver, fingerprint, status, idempotency_key, alert, created_at,
                          next_at, kind, subscription, order_key)
VALUES (:receiver, :workflow_id, :status, :key, :body, :at, :at, 'transition', :subscription,
        :workflow_id)
ON CONFLICT (receiver, idempotency_key) DO NOTHING;

-- name: workflow_kinds
-- Type, tenant, version and terminal flag of some workflows (by primary key).
SELECT id, type, tenant, version, terminal FROM workflows WHERE id IN (SELECT value FROM json_each(:ids));

-- name: outbox_pending
-- Notifications still due or claimed, per kind, and the oldest one's creation time.
SELECT kind, count(*) AS n, min(created_at) AS oldest FROM alert_outbox INDEXED BY alert_outbox_due
 WHERE next_at IS NOT NULL GROUP BY kind;

-- name: log_head
-- The last seq of the log (the primary key's end): how far behind a subscription is.
SELECT coalesce(max(seq), 0) AS seq FROM transitions;
