-- name: get_workflow
-- One workflow row by id.
SELECT * FROM workflows WHERE id = %(id)s;

-- name: version_of
-- The current version of a workflow (for conflict reports).
SELECT version FROM workflows WHERE id = %(id)s;

-- name: fork_source
-- A fork's source: whether a worker holds it, and its latest claim's fencing token; locked
-- until the fork commits (a claim waits: none begins while the fork is written).
SELECT lease_owner, fence FROM workflows WHERE id = %(id)s FOR SHARE;

-- name: write_refusal
-- Why a compare-and-swap matched nothing: the row's version and lease, and whether the inbox
-- items it would consume are still there.
SELECT version, lease_owner, fence,
       (SELECT count(*) FROM inbox
         WHERE workflow_id = %(id)s AND id = ANY(%(inbox_ids)s::bigint[])
           AND consumed_at IS NULL) AS unconsumed,
       (%(fired_timer_id)s::bigint IS NULL
        OR EXISTS (SELECT 1 FROM timers
                    WHERE id = %(fired_timer_id)s::bigint AND workflow_id = %(id)s))
           AS fired_pending
  FROM workflows WHERE id = %(id)s;

-- name: transition_by_key
-- The log entry a client's idempotency key produced on a workflow, or (a row of NULL log
-- columns with input_name and input_id) the input it posted to it instead.
SELECT t.*, NULL::text AS input_name, NULL::bigint AS input_id
  FROM transitions t WHERE t.workflow_id = %(id)s AND t.idempotency_key = %(key)s
UNION ALL
SELECT t.*, i.name, i.id
  FROM inbox i LEFT JOIN transitions t ON FALSE
 WHERE i.workflow_id = %(id)s AND i.idempotency_key = %(key)s::text;

-- name: create_workflow
-- Create a workflow at version 1 with its first log entry and timers, in one statement; a
-- duplicate id is left alone (idempotent start) and the existing row is returned instead.
-- Workers are notified (on commit) when the new workflow has a due time. A workflow with
-- search attributes is created with one more part (statewright/store/postgres/searched.py).
WITH new_timers AS (
    SELECT t.due_at, t.event, t.payload, t.key, t.every, t.keep, t.ord
      FROM unnest(%(timer_due)s::float8[], %(timer_event)s::text[],
                  %(timer_payload)s::jsonb[], %(timer_key)s::text[], %(timer_every)s::float8[],
                  %(timer_keep)s::boolean[])
           WITH ORDINALITY AS t(due_at, event, payload, key, every, keep, ord)
), ins AS (
    INSERT INTO workflows (id, type, machine_version, state, context, version, attempts,
                           terminal, created_at, updated_at, state_entered_at, next_due_at,
                           tenant, trace, parent_id, parent_key)
    VALUES (%(id)s, %(type)s, %(machine_version)s, %(state)s, %(context)s::jsonb, 1, 0,
            %(terminal)s, %(at)s, %(at)s, %(at)s,
            LEAST(%(run_at)s::float8, (SELECT min(due_at) FROM new_timers)), %(tenant)s,
            %(trace)s::text, %(parent_id)s::text, %(parent_key)s::text)
    ON CONFLICT (id) DO NOTHING
    RETURNING *
), appending AS (
    SELECT pg_advisory_xact_lock_shared(hashtext('statewright.log')) FROM ins
), logged AS (
    INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                             context_patch, at, idempotency_key)
    SELECT id, 1, NULL, state, %(event)s::text, coalesce(%(payload)s::jsonb, context),
           %(actor)s::text, context, %(at)s::float8,
           %(idempotency_key)s::text
      FROM ins, appending
), armed AS (
    INSERT INTO timers (workflow_id, due_at, event, payload, key, every, keep)
    SELECT ins.id, t.due_at, t.event, t.payload, t.key, t.every, t.keep
      FROM ins, new_timers t ORDER BY t.ord
), copied AS (
    -- done steps written with it (a fork's copies of its source's), same transaction
    INSERT INTO steps (key, workflow_id, step, status, result, attempts, started_at,
                       finished_at)
    SELECT s.key, ins.id, s.step, 'done', s.result, s.attempts, s.started_at, s.finished_at
      FROM ins, unnest(%(step_key)s::text[], %(step_name)s::text[], %(step_result)s::jsonb[],
                       %(step_attempts)s::int[], %(step_started)s::float8[],
                       %(step_finished)s::float8[])
           AS s(key, step, result, attempts, started_at, finished_at)
    ON CONFLICT (key) DO NOTHING
)
SELECT ins.*, TRUE AS created,
       CASE WHEN ins.next_due_at IS NOT NULL THEN pg_notify('statewright_work', '') END
  FROM ins
UNION ALL
SELECT w.*, FALSE, NULL FROM workflows w
 WHERE w.id = %(id)s AND NOT EXISTS (SELECT 1 FROM ins);

-- name: parent_of_child
-- A child's create: its parent's state and lease, locked against its end until the child
-- is written (see NewWorkflow.parent). Locked for update, not shared: the first child's
-- create marks the parent (mark_parent), and two creates that both held a shared lock
-- would each wait for the other's to update it.
SELECT state, terminal, lease_owner, fence, has_children FROM workflows WHERE id = %(id)s
   FOR NO KEY UPDATE;

-- name: mark_parent
-- A parent's first child: it has children from now on (its end cancels the live ones).
UPDATE workflows SET has_children = true WHERE id = %(id)s;

-- name: children
-- A parent's children in id order, from an id on (a page).
SELECT * FROM workflows WHERE parent_id = %(parent)s::text AND id > %(after)s::text ORDER BY id
 LIMIT %(limit)s;

-- name: orphans
-- Live children whose parent is terminal or gone (an ended parent cancels them): those no
-- cancel request waits on with a worker (a request on a row nobody holds may wait for good),
-- after (after_parent, after_id) in the order of the index of live children, at most
-- %(limit)s (a recovery round reads a page and the next round the next: an ended parent's
-- abandoned children, read every time, cannot hide the others).
SELECT c.* FROM workflows c LEFT JOIN workflows p ON p.id = c.parent_id
 WHERE c.parent_id IS NOT NULL AND NOT c.terminal
   AND (c.parent_id, c.id) > (%(after_parent)s::text, %(after_id)s::text)
   AND (c.cancel_requested IS NULL OR c.lease_owner IS NULL)
   AND (p.id IS NULL OR p.terminal)
 ORDER BY c.parent_id, c.id LIMIT %(limit)s;

-- name: apply_transition
-- One whole transition in one statement (one round trip): compare-and-swap the row (version,
-- and the worker's lease when fenced), append the log entry, replace the timers, consume inbox
-- items, notify workers when work is due. All parts see the snapshot from before the
-- statement, so next_due_at is computed from the timers that remain (the old ones minus the
-- cleared or fired ones, plus the new ones): the earlier of that and the handler's run time,
-- NULL exactly when there is no timer and no run; now, while a cancel request is pending on a
-- live workflow (a claim delivers it: a writer killed before it did must not strand it). The
-- inbox items are locked first so two
-- consumers cannot both succeed; an already consumed one makes the compare-and-swap match
-- nothing, like a stale version. The log entry is appended under the shared log lock (see
-- log_horizon), taken after the row lock so a writer holding it never waits for anything else.
-- Timers: clearing deletes those not kept (all at a terminal state); keyed timers being armed
-- replace their key's pending one (deleted before the insert, which reads what the deletion
-- returned so it runs after it). A fired timer must still be pending. Every write requires
-- the row version its snapshot saw (xmin): a timer scheduled on its own (or a child's end
-- armed on its parent) commits with an update of the row, so a write whose snapshot missed
-- it matches nothing here and the store runs it again on a fresh snapshot. A step outcome
-- carried by the transition (the handler's last step, done) is recorded with it, only if that
-- attempt is still executing (else the compare-and-swap matches nothing). Workers are notified
-- only of a row no worker holds: one whose lease the transition kept (a worker's handler
-- chaining to the next state's) cannot be claimed, and waking every worker of every process
-- for it cost each a claim and a cancel check per transition. A transition that changes
-- search attributes runs it with one more part (statewright/store/postgres/searched.py).
WITH items AS (
    SELECT id FROM inbox
     WHERE workflow_id = %(id)s AND id = ANY(%(inbox_ids)s::bigint[]) AND consumed_at IS NULL
       FOR UPDATE
), new_timers AS (
    SELECT t.due_at, t.event, t.payload, t.key, t.every, t.keep, t.ord
      FROM unnest(%(timer_due)s::float8[], %(timer_event)s::text[],
                  %(timer_payload)s::jsonb[], %(timer_key)s::text[], %(timer_every)s::float8[],
                  %(timer_keep)s::boolean[])
           WITH ORDINALITY AS t(due_at, event, payload, key, every, keep, ord)
), moved AS (
    UPDATE workflows
       SET state = %(to_state)s, context = %(context)s::jsonb, version = version + 1,
           attempts = %(attempts)s, terminal = %(terminal)s, updated_at = %(at)s,
           total_attempts = coalesce(%(total_attempts)s::integer, total_attempts),
           machine_version = coalesce(%(machine_version)s::integer, machine_version),
           parked = NULL, trace = coalesce(%(trace)s::text, trace),
           state_entered_at = CASE WHEN state = %(to_state)s THEN state_entered_at
                                   ELSE %(at)s END,
           next_due_at = LEAST(%(run_at)s::float8,
                               CASE WHEN cancel_requested IS NOT NULL AND NOT %(terminal)s
                                    THEN %(at)s::float8 END,
                               (SELECT min(due_at) FROM new_timers),
                               (SELECT min(due_at) FROM timers
                                 WHERE workflow_id = %(id)s
                                   AND (NOT %(clear_timers)s OR (keep AND NOT %(terminal)s))
                                   AND id IS DISTINCT FROM %(fired_timer_id)s::bigint
                                   AND (key IS NULL OR key <> ALL(%(drop_keys)s::text[])))),
           last_error = %(last_error)s,
           cancel_requested = CASE WHEN NOT %(terminal)s THEN cancel_requested END,
           cancel_actor = CASE WHEN NOT %(terminal)s THEN cancel_actor END,
           cancel_at = CASE WHEN NOT %(terminal)s THEN cancel_at END,
           cancel_version = CASE WHEN NOT %(terminal)s THEN cancel_version END,
           cancel_key = CASE WHEN NOT %(terminal)s THEN cancel_key END,
           progress = CASE WHEN state = %(to_state)s THEN progress END,
           lease_owner = CASE WHEN NOT %(release_lease)s THEN lease_owner END,
           lease_expires_at = CASE WHEN NOT %(release_lease)s THEN lease_expires_at END
     WHERE id = %(id)s AND version = %(expected_version)s
       AND (%(fence)s::bigint IS NULL
            OR (lease_owner = %(owner)s::text AND fence = %(fence)s::bigint))
       AND (NOT %(require_unleased)s OR lease_owner IS NULL)
       AND (SELECT count(*) FROM items) = cardinality(%(inbox_ids)s::bigint[])
       AND (%(fired_timer_id)s::bigint IS NULL
            OR EXISTS (SELECT 1 FROM timers
                        WHERE id = %(fired_timer_id)s::bigint AND workflow_id = %(id)s))
       AND xmin = (SELECT w.xmin FROM workflows w WHERE w.id = %(id)s)
       AND (%(step_key)s::text IS NULL
            OR EXISTS (SELECT 1 FROM steps
                        WHERE key = %(step_key)s::text AND workflow_id = %(id)s
                          AND status = 'executing' AND attempts = %(step_attempt)s::integer))
    RETURNING *
), finished AS (
    UPDATE steps
       SET status = %(step_status)s::text, result = %(step_result)s::jsonb,
           error = %(step_error)s::text, outcome = %(step_outcome)s::text,
           finished_at = %(step_at)s::float8
     WHERE key = %(step_key)s::text AND status = 'executing'
       AND attempts = %(step_attempt)s::integer AND EXISTS (SELECT 1 FROM moved)
), appending AS (
    SELECT pg_advisory_xact_lock_shared(hashtext('statewright.log')) FROM moved
), logged AS (
    INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                             context_patch, at, idempotency_key, messages)
    SELECT id, version, %(from_state)s::text, state, %(event)s::text, %(payload)s::jsonb,
           %(actor)s::text, %(context_patch)s::jsonb, updated_at, %(idempotency_key)s::text,
           %(messages)s::jsonb
      FROM moved, appending
), disarmed AS (
    DELETE FROM timers
     WHERE workflow_id = %(id)s AND EXISTS (SELECT 1 FROM moved)
       AND ((%(clear_timers)s AND (NOT keep OR %(terminal)s))
            OR id = %(fired_timer_id)s::bigint OR key = ANY(%(drop_keys)s::text[]))
    RETURNING id
), armed AS (
    INSERT INTO timers (workflow_id, due_at, event, payload, key, every, keep)
    SELECT moved.id, t.due_at, t.event, t.payload, t.key, t.every, t.keep
      FROM moved, new_timers t
     WHERE (SELECT count(*) FROM disarmed) >= 0
     ORDER BY t.ord
), consumed AS (
    UPDATE inbox SET consumed_at = %(at)s
     WHERE id IN (SELECT id FROM items) AND EXISTS (SELECT 1 FROM moved)
)
SELECT moved.*,
       CASE WHEN moved.next_due_at IS NOT NULL AND moved.lease_owner IS NULL
            THEN pg_notify('statewright_work', '') END
  FROM moved;

-- name: history
-- One workflow's log in version order (a NULL limit is no limit).
SELECT * FROM transitions WHERE workflow_id = %(id)s AND version > %(after)s ORDER BY version
 LIMIT %(limit)s;

-- name: log_lock
-- Wait until no transaction is appending to the log (they hold the lock shared until commit).
SELECT pg_advisory_xact_lock(hashtext('statewright.log'));

-- name: log_horizon
-- Under log_lock: every seq up to the largest one is final (committed or rolled back for good).
-- Kept in the session for transitions_since, which reads after the lock is released.
SELECT set_config('statewright.log_horizon', coalesce(max(seq), 0)::text, false)
  FROM transitions;

-- The log after a cursor (read up to the horizon: seq values are taken before commit, so a
-- later seq can commit first; reading only up to the horizon means a cursor never skips one),
-- counts by state, recent events and rejections are built from the filters given by
-- statewright/store/sqlbuild.py.

-- name: workflow_counts
-- Workflows per (type, state, terminal), kept by the triggers of migration 0007 (one row per
-- writing backend's slot, summed here): no row of workflows is read.
SELECT type, state, terminal, sum(n)::bigint AS n FROM workflow_counts
 GROUP BY type, state, terminal HAVING sum(n) <> 0 ORDER BY type, state, terminal;

-- name: claim_due
-- Lease the due, unleased, live workflows, earliest first; rows another worker is claiming
-- right now are skipped, so no workflow is handed to two workers. Each claim gets a new
-- fencing token. The ids are collected first (ARRAY: run once), then updated by primary key:
-- planned without the values (a generic plan), `id IN (subquery)` may become a hash join
-- over every workflow.
UPDATE workflows SET lease_owner = %(worker)s, lease_expires_at = %(until)s, fence = fence + 1
 WHERE id = ANY(ARRAY(SELECT id FROM workflows
                       WHERE next_due_at <= %(now)s AND lease_owner IS NULL AND NOT terminal
                       ORDER BY next_due_at LIMIT %(limit)s
                         FOR UPDATE SKIP LOCKED))
RETURNING *;

-- name: claim_due_of_types
-- claim_due restricted to some workflow types.
UPDATE workflows SET lease_owner = %(worker)s, lease_expires_at = %(until)s, fence = fence + 1
 WHERE id = ANY(ARRAY(SELECT id FROM workflows
                       WHERE next_due_at <= %(now)s AND lease_owner IS NULL AND NOT terminal
                         AND type = ANY(%(types)s::text[])
                       ORDER BY next_due_at LIMIT %(limit)s
                         FOR UPDATE SKIP LOCKED))
RETURNING *;

-- name: renew_leases
-- Extend a worker's leases (heartbeat): only those it still holds under the same claim.
UPDATE workflows w SET lease_expires_at = %(until)s
  FROM unnest(%(ids)s::text[], %(fences)s::bigint[]) AS h(id, fence)
 WHERE w.id = h.id AND w.fence = h.fence AND w.lease_owner = %(worker)s
RETURNING w.id;

-- name: release_lease
-- Give a lease back (only the same claim's).
UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
 WHERE id = %(id)s AND lease_owner = %(worker)s AND fence = %(fence)s;

-- name: lock_for_wake
-- A suspended wait's deferral locks the row first (see post_input).
SELECT 1 FROM workflows WHERE id = %(id)s FOR UPDATE;

-- name: defer_workflow
-- Keep the state: counters, error, parked reason, next due time (merged with the pending
-- timers); release the lease; consume the inputs the handler run took. Fenced like a
-- transition; the inbox items are locked first, like apply_transition's. Timer changes (a
-- fired recurring timer re-armed, a handler's schedules) as in apply_transition. A suspended
-- wait (%(wake)s) is due now when its input is already there (posted while it was leased).
WITH items AS (
    SELECT id FROM inbox
     WHERE workflow_id = %(id)s AND id = ANY(%(inbox_ids)s::bigint[]) AND consumed_at IS NULL
       FOR UPDATE
), new_timers AS (
    SELECT t.due_at, t.event, t.payload, t.key, t.every, t.keep, t.ord
      FROM unnest(%(timer_due)s::float8[], %(timer_event)s::text[],
                  %(timer_payload)s::jsonb[], %(timer_key)s::text[], %(timer_every)s::float8[],
                  %(timer_keep)s::boolean[])
           WITH ORDINALITY AS t(due_at, event, payload, key, every, keep, ord)
), deferred AS (
    UPDATE workflows
       SET attempts = %(attempts)s,
           total_attempts = coalesce(%(total_attempts)s::integer, total_attempts),
           last_error = %(last_error)s, parked = %(parked)s::text, updated_at = %(at)s,
           lease_owner = NULL, lease_expires_at = NULL,
           next_due_at = LEAST(%(next_due_at)s::float8,
                               (SELECT min(due_at) FROM new_timers),
                               (SELECT min(due_at) FROM timers
                                 WHERE workflow_id = %(id)s
                                   AND id IS DISTINCT FROM %(fired_timer_id)s::bigint
                                   AND (key IS NULL OR key <> ALL(%(drop_keys)s::text[]))),
                               CASE WHEN %(wake)s::boolean THEN (
                                 SELECT %(at)s::float8 FROM inbox
                                  WHERE workflow_id = %(id)s AND consumed_at IS NULL
                                    AND (%(wake_name)s::text IS NULL
                                         OR name = %(wake_name)s::text)
                                    AND id <> ALL(%(wake_skip)s::bigint[])
                                  LIMIT 1) END)
     WHERE id = %(id)s AND version = %(expected_version)s
       AND (%(fence)s::bigint IS NULL
            OR (lease_owner = %(owner)s::text AND fence = %(fence)s::bigint))
       AND (SELECT count(*) FROM items) = cardinality(%(inbox_ids)s::bigint[])
       AND (%(fired_timer_id)s::bigint IS NULL
            OR EXISTS (SELECT 1 FROM timers
                        WHERE id = %(fired_timer_id)s::bigint AND workflow_id = %(id)s))
       AND xmin = (SELECT w.xmin FROM workflows w WHERE w.id = %(id)s)
    RETURNING *
), disarmed AS (
    DELETE FROM timers
     WHERE workflow_id = %(id)s AND EXISTS (SELECT 1 FROM deferred)
       AND (id = %(fired_timer_id)s::bigint OR key = ANY(%(drop_keys)s::text[]))
    RETURNING id
), armed AS (
    INSERT INTO timers (workflow_id, due_at, event, payload, key, every, keep)
    SELECT deferred.id, t.due_at, t.event, t.payload, t.key, t.every, t.keep
      FROM deferred, new_timers t
     WHERE (SELECT count(*) FROM disarmed) >= 0
     ORDER BY t.ord
), consumed AS (
    UPDATE inbox SET consumed_at = %(at)s
     WHERE id IN (SELECT id FROM items) AND EXISTS (SELECT 1 FROM deferred)
)
SELECT deferred.*,
       CASE WHEN deferred.next_due_at IS NOT NULL THEN pg_notify('statewright_work', '') END
  FROM deferred;

-- name: expired_leases
-- Leases whose holder stopped renewing them.
SELECT * FROM workflows WHERE lease_owner IS NOT NULL AND lease_expires_at < %(now)s
 ORDER BY lease_expires_at LIMIT %(limit)s;

-- name: leased_by
-- The workflows one worker holds.
SELECT * FROM workflows WHERE lease_owner = %(owner)s ORDER BY id;

-- name: lease_owners
-- Workers that hold leases.
SELECT DISTINCT lease_owner FROM workflows WHERE lease_owner IS NOT NULL ORDER BY lease_owner;

-- name: break_leases
-- Clear every lease of one owner (expired before a time, when given); the freed work may be
-- due, so wake the workers.
WITH freed AS (
    UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
     WHERE lease_owner = %(owner)s
       AND (%(expired_before)s::float8 IS NULL OR lease_expires_at < %(expired_before)s::float8)
    RETURNING 1
)
SELECT count(*) AS n, CASE WHEN count(*) > 0 THEN pg_notify('statewright_work', '') END
  FROM freed;

-- name: break_leases_of
-- Clear the leases of one owner on some workflows (expired before a time, when given); wake
-- the workers.
WITH freed AS (
    UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL
     WHERE lease_owner = %(owner)s AND id = ANY(%(ids)s::text[])
       AND (%(expired_before)s::float8 IS NULL OR lease_expires_at < %(expired_before)s::float8)
    RETURNING 1
)
SELECT count(*) AS n, CASE WHEN count(*) > 0 THEN pg_notify('statewright_work', '') END
  FROM freed;

-- name: request_cancel
-- Record a cancel request on a live workflow (a newer one replaces it) and wake its worker;
-- return the row either way.
WITH flagged AS (
    UPDATE workflows
       SET cancel_requested = %(reason)s, cancel_actor = %(actor)s::text,
           cancel_at = %(at)s::float8, cancel_version = %(version)s::integer,
           cancel_key = %(key)s::text, updated_at = coalesce(%(at)s::float8, updated_at)
     WHERE id = %(id)s AND NOT terminal
    RETURNING *
)
SELECT flagged.*, pg_notify('statewright_work', '') FROM flagged
UNION ALL
SELECT w.*, NULL FROM workflows w
 WHERE w.id = %(id)s AND NOT EXISTS (SELECT 1 FROM flagged);

-- name: cancel_requests
-- Pending cancel requests among some workflows.
SELECT id, cancel_requested, cancel_actor, cancel_at, cancel_version, cancel_key
  FROM workflows
 WHERE cancel_requested IS NOT NULL AND id = ANY(%(ids)s::text[]);

-- name: record_progress
-- The latest progress report of a workflow's running step (fenced for a worker); tells a
-- missing workflow from a lost lease.
WITH updated AS (
    UPDATE workflows SET progress = %(progress)s::jsonb
     WHERE id = %(id)s
       AND (%(fence)s::bigint IS NULL
            OR (lease_owner = %(owner)s::text AND fence = %(fence)s::bigint))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM updated) AS held,
       EXISTS (SELECT 1 FROM workflows WHERE id = %(id)s) AS found;

-- name: live_versions_between
-- Live workflows of one type on machine versions strictly between two (a gap between the
-- registered versions): one range of workflows_live_version.
SELECT machine_version, count(*) AS n FROM workflows
 WHERE type = %(type)s AND NOT terminal
   AND machine_version > %(lo)s AND machine_version < %(hi)s
 GROUP BY machine_version ORDER BY machine_version;

-- name: add_definition
-- Record a registered machine definition unless its (name, version) has one; the row as it is.
WITH added AS (
    INSERT INTO definitions (name, version, fingerprint, document, registered_at)
    VALUES (%(name)s, %(version)s, %(fingerprint)s, %(document)s::jsonb, %(at)s)
    ON CONFLICT (name, version) DO NOTHING
    RETURNING fingerprint, document
)
SELECT fingerprint, document FROM added
UNION ALL
SELECT fingerprint, document FROM definitions
 WHERE name = %(name)s AND version = %(version)s AND NOT EXISTS (SELECT 1 FROM added);

-- name: replace_definition
-- Record an edited definition of a machine version (an edit that only adds, allowed).
UPDATE definitions SET fingerprint = %(fingerprint)s, document = %(document)s::jsonb,
       registered_at = %(at)s
 WHERE name = %(name)s AND version = %(version)s;

-- name: timers
-- A workflow's pending timers, earliest first.
SELECT * FROM timers WHERE workflow_id = %(id)s ORDER BY due_at, id;

-- name: timers_page
-- A page of a workflow's pending timers, earliest first, after a (due_at, id) cursor.
SELECT * FROM timers
 WHERE workflow_id = %(id)s
   AND (%(after_due)s::float8 IS NULL
        OR (due_at, id) > (%(after_due)s::float8, %(after_id)s::bigint))
 ORDER BY due_at, id LIMIT %(limit)s;

-- name: timer_visit
-- Lock the workflow row while scheduling or cancelling a timer on its own (transitions take
-- the same lock first, so the two serialise), and read what the change checks and recomputes.
SELECT state, state_entered_at, terminal, next_due_at, attempts, parked
  FROM workflows WHERE id = %(id)s FOR NO KEY UPDATE;

-- name: take_timer_key
-- Delete a workflow's pending timer of one key (replaced or cancelled); its due time.
DELETE FROM timers WHERE workflow_id = %(id)s AND key = %(key)s RETURNING due_at;

-- name: insert_timer
-- Arm one timer.
INSERT INTO timers (workflow_id, due_at, event, payload, key, every, keep, scheduled_by)
VALUES (%(id)s, %(due_at)s, %(event)s, %(payload)s::jsonb, %(key)s, %(every)s, %(keep)s,
        %(scheduled_by)s)
RETURNING *;

-- name: set_next_due
-- After a timer was scheduled or cancelled on its own: the row's next due time (an update of
-- the row in any case: a concurrent write that read the timers before it then runs again),
-- and wake the workers when it is due.
UPDATE workflows SET next_due_at = %(next_due_at)s::float8 WHERE id = %(id)s
RETURNING next_due_at,
          CASE WHEN next_due_at IS NOT NULL THEN pg_notify('statewright_work', '') END;

-- name: first_timer
-- The earliest pending timer of a workflow.
SELECT min(due_at) AS first FROM timers WHERE workflow_id = %(id)s;

-- name: step_begin
-- Record a step as executing before its action runs; a step found executing or failed is
-- being run again (one more attempt); a done step is left alone (no row returned). Fenced:
-- nothing is written once the worker's lease is gone. FOR SHARE waits for a concurrent claim
-- or lease break to commit and then checks the lease again, so a step can never begin under
-- a lease that is being taken away.
WITH fenced AS (
    SELECT id FROM workflows
     WHERE id = %(workflow_id)s
       AND (%(fence)s::bigint IS NULL
            OR (lease_owner = %(owner)s::text AND fence = %(fence)s::bigint))
       FOR SHARE
)
INSERT INTO steps (key, workflow_id, step, status, attempts, started_at, fence, compensation)
SELECT %(key)s, id, %(step)s, 'executing', 1, %(at)s, %(fence)s::bigint, %(compensation)s::text
  FROM fenced
ON CONFLICT (key) DO UPDATE
   SET status = 'executing', attempts = steps.attempts + 1, started_at = EXCLUDED.started_at,
       finished_at = NULL, error = NULL, outcome = NULL, fence = EXCLUDED.fence,
       compensation = EXCLUDED.compensation
 WHERE steps.status <> 'done'
RETURNING *;

-- name: step_open
-- A step's usual start in one round trip: the workflow's pending cancel request and the
-- step's ledger entry; only when there is neither is the step recorded executing, fenced as
-- in step_begin (FOR SHARE waits out a concurrent claim, then checks the lease again). A
-- concurrent insert of the key (ON CONFLICT) begins nothing: the caller reads it.
WITH w AS (
    SELECT id, cancel_requested, cancel_actor, cancel_at, cancel_version, cancel_key
      FROM workflows WHERE id = %(workflow_id)s
), fenced AS (
    SELECT id FROM workflows
     WHERE id = %(workflow_id)s
       AND (%(fence)s::bigint IS NULL
            OR (lease_owner = %(owner)s::text AND fence = %(fence)s::bigint))
       FOR SHARE
), found AS (
    SELECT * FROM steps WHERE key = %(key)s
), begun AS (
    INSERT INTO steps (key, workflow_id, step, status, attempts, started_at, fence,
                       compensation)
    SELECT %(key)s, f.id, %(step)s, 'executing', 1, %(at)s, %(fence)s::bigint,
           %(compensation)s::text
      FROM fenced f JOIN w ON w.cancel_requested IS NULL
     WHERE NOT EXISTS (SELECT 1 FROM found)
    ON CONFLICT (key) DO NOTHING
    RETURNING *
)
SELECT w.*, EXISTS (SELECT 1 FROM fenced) AS held,
       (SELECT to_jsonb(f) FROM found f) AS found,
       (SELECT to_jsonb(b) FROM begun b) AS begun
  FROM w;

-- name: step_and_lease
-- After step_begin wrote nothing: the ledger entry, and whether the workflow and the lease
-- are still there.
SELECT (SELECT to_jsonb(s) FROM steps s WHERE s.key = %(key)s) AS step,
       EXISTS (SELECT 1 FROM workflows WHERE id = %(workflow_id)s) AS found;

-- name: get_step
-- One step ledger entry.
SELECT * FROM steps WHERE key = %(key)s;

-- name: finish_step
-- Record the outcome of one attempt: only while that attempt is executing and, for a worker,
-- its lease still holds (a late writer never overwrites a newer result).
UPDATE steps
   SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s,
       outcome = %(outcome)s::text, finished_at = %(at)s
 WHERE key = %(key)s AND status = 'executing' AND attempts = %(attempt)s
   AND (%(fence)s::bigint IS NULL
        OR EXISTS (SELECT 1 FROM workflows w
                    WHERE w.id = steps.workflow_id AND w.lease_owner = %(owner)s::text
                      AND w.fence = %(fence)s::bigint))
RETURNING *;

-- name: resolve_step
-- An operator's verdict on a step whose outcome was unknown (never on a done step, never
-- while a worker holds the workflow).
UPDATE steps
   SET status = %(status)s, result = %(result)s::jsonb, outcome = %(outcome)s::text,
       error = %(error)s, finished_at = %(at)s
 WHERE key = %(key)s AND status <> 'done'
   AND NOT EXISTS (SELECT 1 FROM workflows w
                    WHERE w.id = steps.workflow_id AND w.lease_owner IS NOT NULL)
RETURNING *;

-- name: unresolved_steps
-- The steps of some workflows whose outcome is unknown: not done, and not known never to
-- have taken effect (found executing, or failed after the call may have reached the other
-- side). A range of steps_workflow per workflow: OFFSET 0 keeps the filter out of the
-- inner scan, whose estimate would otherwise talk a generic plan into reading every step.
SELECT * FROM (SELECT * FROM steps WHERE workflow_id = ANY(%(ids)s::text[])
                ORDER BY workflow_id, started_at, key OFFSET 0) AS s
 WHERE status <> 'done' AND (outcome IS NULL OR outcome <> 'not_applied');

-- name: post_input
-- Append an external input to a live workflow's inbox (or find the one posted under the same
-- idempotency key), make an idle workflow in the given state due now, and wake the workers.
-- Reports what it found when it posted nothing (no workflow, a finished one, an earlier key,
-- a key an event of the workflow's log used: used_event, used_version). The row is locked
-- first, its latest version read, and held until the post commits: a suspended wait's
-- deferral (lock_for_wake) either waits for the post and sees its input, or came first and is
-- seen released here (the wake decided on wf, not on this statement's older snapshot).
WITH wf AS (
    SELECT id, state, terminal, lease_owner, parked, attempts, next_due_at
      FROM workflows WHERE id = %(id)s FOR NO KEY UPDATE
), earlier AS (
    SELECT * FROM inbox
     WHERE workflow_id = %(id)s AND idempotency_key = %(key)s::text
), used AS (
    SELECT event, version FROM transitions
     WHERE workflow_id = %(id)s AND idempotency_key = %(key)s::text
), posted AS (
    INSERT INTO inbox (workflow_id, name, payload, posted_at, idempotency_key)
    SELECT id, %(name)s::text, %(payload)s::jsonb, %(at)s::float8, %(key)s::text
      FROM wf WHERE NOT terminal AND NOT EXISTS (SELECT 1 FROM earlier)
       AND NOT EXISTS (SELECT 1 FROM used)
    ON CONFLICT (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), woken AS (
    UPDATE workflows SET next_due_at = %(at)s::float8
     WHERE id = %(id)s AND EXISTS (SELECT 1 FROM posted)
       AND EXISTS (SELECT 1 FROM wf
                    WHERE state = %(wake_state)s::text AND NOT terminal
                      AND lease_owner IS NULL AND parked IS NULL AND attempts = 0
                      AND (next_due_at IS NULL OR next_due_at > %(at)s::float8))
    RETURNING 1
)
SELECT to_jsonb(p) AS item, TRUE AS created, wf.state, wf.terminal,
       pg_notify('statewright_work', '') AS notified,
       NULL::text AS used_event, NULL::bigint AS used_version
  FROM posted p, wf
UNION ALL
SELECT to_jsonb(e), FALSE, wf.state, wf.terminal, NULL, NULL::text, NULL::bigint
  FROM earlier e, wf
UNION ALL
SELECT NULL, FALSE, wf.state, wf.terminal, NULL, u.event, u.version::bigint
  FROM wf LEFT JOIN used u ON TRUE
 WHERE NOT EXISTS (SELECT 1 FROM posted) AND NOT EXISTS (SELECT 1 FROM earlier);

-- name: input_by_key
-- The input a client's idempotency key posted to a workflow (after a racing post).
SELECT * FROM inbox WHERE workflow_id = %(id)s AND idempotency_key = %(key)s;

-- name: next_input
-- The oldest unconsumed input, optionally of one name, other than those already taken.
SELECT * FROM inbox
 WHERE workflow_id = %(id)s AND consumed_at IS NULL
   AND (%(name)s::text IS NULL OR name = %(name)s::text)
   AND id <> ALL(%(skip)s::bigint[])
 ORDER BY id LIMIT 1;

-- name: record_rejection
-- Log an event the engine refused.
INSERT INTO rejections (workflow_id, type, tenant, state, event, code, actor, message, at)
VALUES (%(workflow_id)s, %(type)s, %(tenant)s, %(state)s, %(event)s, %(code)s, %(actor)s,
        %(message)s, %(at)s);

-- name: take_over
-- Take a lease over from a lost worker (expired before a time, when given): a new claim with
-- a new fencing token, so the lost worker's later writes are refused.
UPDATE workflows SET lease_owner = %(worker)s, lease_expires_at = %(until)s, fence = fence + 1
 WHERE id = %(id)s AND lease_owner = %(owner)s
   AND (%(expired_before)s::float8 IS NULL OR lease_expires_at < %(expired_before)s::float8)
RETURNING *;

-- name: alert_states
-- The alerts firing now (a handful of rows).
SELECT fingerprint, rule, labels, annotations, starts_at FROM alert_states ORDER BY fingerprint;

-- name: alert_fire
-- Record an alert as firing unless it is already (of two evaluators, one inserts).
INSERT INTO alert_states (fingerprint, rule, labels, annotations, starts_at)
VALUES (%(fingerprint)s, %(rule)s, %(labels)s::jsonb, %(annotations)s::jsonb, %(starts_at)s)
ON CONFLICT (fingerprint) DO NOTHING;

-- name: alert_resolve
-- Forget a firing alert, only the firing that started at starts_at (of two evaluators, one).
DELETE FROM alert_states WHERE fingerprint = %(fingerprint)s AND starts_at = %(starts_at)s;

-- name: alert_enqueue
-- A notification for one receiver, due now.
INSERT INTO alert_outbox (receiver, fingerprint, status, idempotency_key, alert, created_at, next_at)
VALUES (%(receiver)s, %(fingerprint)s, %(status)s, %(key)s, %(alert)s::jsonb, %(at)s, %(at)s)
ON CONFLICT (receiver, idempotency_key) DO NOTHING;

-- name: alert_claim
-- Claim due notifications until :until; rows another deliverer is claiming are skipped.
-- A transition's notification (order_key set) waits while an earlier one of its
-- (subscription, workflow) is still due or claimed: in order per workflow.
UPDATE alert_outbox SET claim = %(claim)s, next_at = %(until)s
 WHERE id IN (SELECT o.id FROM alert_outbox o
               WHERE o.next_at IS NOT NULL AND o.next_at <= %(now)s
                 AND (o.order_key IS NULL
                      OR NOT EXISTS (SELECT 1 FROM alert_outbox e
                                      WHERE e.subscription = o.subscription
                                        AND e.order_key = o.order_key AND e.id < o.id
                                        AND e.next_at IS NOT NULL
                                        AND e.order_key IS NOT NULL))
               ORDER BY o.next_at, o.id LIMIT %(limit)s FOR UPDATE OF o SKIP LOCKED)
RETURNING *;

-- name: alert_delivered
-- A claimed notification was delivered (a claim that ran out and was taken changes nothing).
UPDATE alert_outbox SET delivered_at = %(at)s, next_at = NULL, claim = NULL
 WHERE id = %(nid)s AND claim = %(claim)s;

-- name: alert_retry
-- A claimed notification failed: try again at :due_at.
UPDATE alert_outbox SET attempts = attempts + 1, next_at = %(due_at)s, claim = NULL,
       last_error = %(message)s
 WHERE id = %(nid)s AND claim = %(claim)s;

-- name: alert_dead
-- A claimed notification failed for the last time: dead-lettered, never tried again.
UPDATE alert_outbox SET attempts = attempts + 1, dead_at = %(at)s, next_at = NULL, claim = NULL,
       last_error = %(message)s
 WHERE id = %(nid)s AND claim = %(claim)s;

-- name: alert_outbox
-- Notifications in the order written, after id :after.
SELECT * FROM alert_outbox WHERE id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: schedule_put
-- Declare a schedule: a new one, or a new definition of one (its next tick recomputed).
INSERT INTO schedules (id, type, cron, timezone, catch_up, input, tenant, paused, next_at,
                       created_at, updated_at, created_by)
VALUES (%(id)s, %(type)s, %(cron)s, %(timezone)s, %(catch_up)s, %(input)s, %(tenant)s,
        %(paused)s, %(next_at)s, %(at)s, %(at)s, %(created_by)s)
ON CONFLICT (id) DO UPDATE SET type = excluded.type, cron = excluded.cron,
       timezone = excluded.timezone, catch_up = excluded.catch_up, input = excluded.input,
       tenant = excluded.tenant, paused = excluded.paused, next_at = excluded.next_at,
       updated_at = excluded.updated_at, last_error = NULL, created_by = excluded.created_by
RETURNING *;

-- name: schedule_get
-- One schedule.
SELECT * FROM schedules WHERE id = %(id)s;

-- name: schedule_list
-- The schedules (of one tenant when given), by id.
SELECT * FROM schedules WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
 ORDER BY id;

-- name: schedule_page
-- A page of the schedules (of one tenant when given), by id, after an id.
SELECT * FROM schedules
 WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
   AND (%(after)s::text IS NULL OR id > %(after)s::text)
 ORDER BY id LIMIT %(limit)s;

-- name: schedule_delete
-- Remove a schedule (the workflows it started stay).
DELETE FROM schedules WHERE id = %(id)s;

-- name: schedule_due
-- Active schedules whose next tick has come.
SELECT * FROM schedules WHERE NOT paused AND next_at <= %(now)s ORDER BY next_at
 LIMIT %(limit)s;

-- name: schedule_advance
-- Move a schedule past the ticks fired, only from the next tick the caller read (one
-- worker wins a tick; the others change nothing).
UPDATE schedules SET next_at = %(next_at)s, last_tick = coalesce(%(last_tick)s, last_tick),
       last_workflow_id = coalesce(%(last_workflow_id)s, last_workflow_id),
       last_error = %(message)s, updated_at = %(at)s
 WHERE id = %(id)s AND next_at = %(expected_next_at)s AND NOT paused;

-- name: schedule_pause
-- Pause or resume a schedule (a resumed one continues from its next tick after now).
UPDATE schedules SET paused = %(paused)s, next_at = %(next_at)s, updated_at = %(at)s
 WHERE id = %(id)s
RETURNING *;

-- name: limit_bucket
-- A limited type's row, made on first use and locked (FOR UPDATE of the upsert) until the
-- claim commits: the claims of one limited type are serialized across every worker, each
-- counting the leases the previous one committed. The row holds the type's token bucket.
INSERT INTO type_limits (type, tokens, refilled_at) VALUES (%(type)s, %(burst)s, %(now)s)
ON CONFLICT (type) DO UPDATE SET type = excluded.type
RETURNING tokens, refilled_at;

-- name: limit_refill
-- Keep what is left of a limited type's token bucket after a claim.
UPDATE type_limits SET tokens = %(tokens)s, refilled_at = %(refilled_at)s
 WHERE type = %(type)s;

-- name: limit_leased
-- How many workflows of a type are leased now (lapsed leases do not count). The leases are
-- few (every worker's slots), so they are read whole from workflows_lease.
SELECT count(*) AS n FROM workflows
 WHERE lease_owner IS NOT NULL AND lease_expires_at > %(now)s AND type = %(type)s;

-- name: claim_due_of_type
-- claim_due for one limited type, at most what its limits allow now. `terminal IS NOT TRUE`
-- (not `NOT terminal`) keeps the planner on workflows_type_due (see migration 0011).
UPDATE workflows SET lease_owner = %(worker)s, lease_expires_at = %(until)s, fence = fence + 1
 WHERE id = ANY(ARRAY(SELECT id FROM workflows
                       WHERE type = %(type)s AND next_due_at <= %(now)s
                         AND lease_owner IS NULL AND terminal IS NOT TRUE
                       ORDER BY next_due_at LIMIT %(limit)s
                         FOR UPDATE SKIP LOCKED))
RETURNING *;

-- name: claim_due_of_free_types
-- claim_due of the unlimited types of a worker that also has limited ones: each type's due
-- range of workflows_type_due, merged, so the backlog of a throttled type (at the front of
-- workflows_due) is never read. Rows a type's range locks but the merge leaves are unlocked
-- when the statement ends (another claimer skips them meanwhile, as it skips any being read).
UPDATE workflows SET lease_owner = %(worker)s, lease_expires_at = %(until)s, fence = fence + 1
 WHERE id = ANY(ARRAY(SELECT d.id FROM unnest(%(types)s::text[]) AS t(type)
                        CROSS JOIN LATERAL (
                          SELECT id, next_due_at FROM workflows
                           WHERE type = t.type AND next_due_at <= %(now)s
                             AND lease_owner IS NULL AND terminal IS NOT TRUE
                           ORDER BY next_due_at LIMIT %(limit)s
                             FOR UPDATE SKIP LOCKED) AS d
                       ORDER BY d.next_due_at LIMIT %(limit)s))
RETURNING *;

-- name: prunable
-- Finished workflows that entered their final state before :until, oldest first, after the
-- page key (:since, :id) (prune).
SELECT id, version, state_entered_at FROM workflows
 WHERE terminal AND state_entered_at < %(until)s AND (state_entered_at, id) > (%(since)s, %(id)s)
 ORDER BY state_entered_at, id LIMIT %(limit)s;

-- name: prunable_tenant
-- The same for one tenant.
SELECT id, version, state_entered_at FROM workflows
 WHERE tenant = %(tenant)s AND terminal AND state_entered_at < %(until)s
   AND (state_entered_at, id) > (%(since)s, %(id)s)
 ORDER BY state_entered_at, id LIMIT %(limit)s;

-- name: export_workflows
-- Whole rows of some workflows (prune's archive, import's comparison).
SELECT * FROM workflows WHERE id = ANY(%(ids)s::text[]);

-- name: export_transitions
-- Their logs.
SELECT * FROM transitions WHERE workflow_id = ANY(%(ids)s::text[])
 ORDER BY workflow_id, version;

-- name: export_steps
-- Their step ledgers.
SELECT * FROM steps WHERE workflow_id = ANY(%(ids)s::text[])
 ORDER BY workflow_id, started_at, key;

-- name: export_timers
-- Their pending timers.
SELECT * FROM timers WHERE workflow_id = ANY(%(ids)s::text[])
 ORDER BY workflow_id, due_at, id;

-- name: export_inbox
-- Their inputs, consumed or not.
SELECT * FROM inbox WHERE workflow_id = ANY(%(ids)s::text[])
 ORDER BY workflow_id, id;

-- name: export_rejections
-- Their refused events.
SELECT * FROM rejections WHERE workflow_id = ANY(%(ids)s::text[])
 ORDER BY workflow_id, seq;

-- name: prune_begin
-- Opens prune's sanctioned delete of the log, for this transaction only.
SELECT set_config('statewright.prune', 'on', true);

-- name: prune_workflows
-- Deletes finished workflows' rows, each only at the version prune read (and archived) and
-- not while a child of it lives (an abandoned one: it stays until they end); rows another
-- prune holds are skipped (it deletes them), locked in id order (no deadlock). Each leaves a
-- tombstone: its id is not started again.
WITH l AS (SELECT w.id FROM workflows w
             JOIN unnest(%(ids)s::text[], %(versions)s::int[]) AS k (id, version)
               ON w.id = k.id AND w.version = k.version
            WHERE w.terminal
              AND NOT EXISTS (SELECT 1 FROM workflows c WHERE c.parent_id = w.id AND NOT c.terminal)
            ORDER BY w.id FOR UPDATE OF w SKIP LOCKED),
     d AS (DELETE FROM workflows WHERE id IN (SELECT id FROM l) RETURNING id, tenant, type),
     t AS (INSERT INTO pruned_ids (id, tenant, type, pruned_at)
           SELECT id, tenant, type, %(at)s::float8 FROM d
           ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, type = excluded.type,
                                          pruned_at = excluded.pruned_at)
SELECT id FROM d;

-- name: prune_transitions
-- The logs of workflows prune deleted (each log read in its index order: one range each,
-- whatever the statistics say of how long one log is).
DELETE FROM transitions
 WHERE seq = ANY(ARRAY(SELECT t.seq FROM unnest(%(ids)s::text[]) AS k (id)
                        CROSS JOIN LATERAL (SELECT seq FROM transitions WHERE workflow_id = k.id
                                             ORDER BY version) AS t));

-- name: prune_steps
-- Their step ledgers (the same way).
DELETE FROM steps
 WHERE key = ANY(ARRAY(SELECT s.key FROM unnest(%(ids)s::text[]) AS k (id)
                        CROSS JOIN LATERAL (SELECT key FROM steps WHERE workflow_id = k.id
                                             ORDER BY started_at, key) AS s));

-- name: prune_timers
-- Their timers.
DELETE FROM timers USING unnest(%(ids)s::text[]) AS k (id) WHERE workflow_id = k.id;

-- name: prune_inbox
-- Their inputs.
DELETE FROM inbox USING unnest(%(ids)s::text[]) AS k (id) WHERE workflow_id = k.id;

-- name: prune_search_attributes
-- Their search attributes.
DELETE FROM search_attributes USING unnest(%(ids)s::text[]) AS k (id) WHERE workflow_id = k.id;

-- name: put_search_attribute
-- One search attribute of a restored workflow (an import; the engine's writes carry theirs in
-- create_workflow and apply_transition).
INSERT INTO search_attributes (workflow_id, name, value) VALUES (%(id)s, %(name)s, %(value)s)
ON CONFLICT (workflow_id, name) DO UPDATE SET value = excluded.value;

-- name: search_attributes_of
-- A workflow's search attributes (those with a value).
SELECT name, value FROM search_attributes
 WHERE workflow_id = %(id)s AND value IS NOT NULL ORDER BY name;

-- name: prune_workflow_rejections
-- Their refused events.
DELETE FROM rejections USING unnest(%(ids)s::text[]) AS k (id) WHERE workflow_id = k.id;

-- name: prune_rejections
-- Up to :limit refused events older than :until.
DELETE FROM rejections
 WHERE seq IN (SELECT seq FROM rejections WHERE at < %(until)s ORDER BY at LIMIT %(limit)s);

-- name: prune_rejections_tenant
-- The same for one tenant.
DELETE FROM rejections
 WHERE seq IN (SELECT seq FROM rejections WHERE tenant = %(tenant)s AND at < %(until)s
                ORDER BY at LIMIT %(limit)s);

-- name: prune_alert_notifications
-- Up to :limit delivered or dead-lettered alert notifications created before :until.
DELETE FROM alert_outbox
 WHERE id IN (SELECT id FROM alert_outbox WHERE next_at IS NULL AND created_at < %(until)s
              ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED);

-- name: count_old_alert_notifications
-- How many prune_alert_notifications would delete.
SELECT count(*) AS n FROM alert_outbox WHERE next_at IS NULL AND created_at < %(until)s;

-- name: drop_pruned_id
-- The workflow is back (imported): its id names it again.
DELETE FROM pruned_ids WHERE id = %(id)s;

-- name: forget_pruned_ids
-- Up to :limit tombstones older than :until (of one tenant, or of all with :tenant null):
-- their ids may be started again.
DELETE FROM pruned_ids
 WHERE id IN (SELECT id FROM pruned_ids
               WHERE pruned_at < %(until)s
                 AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
               ORDER BY pruned_at, id LIMIT %(limit)s);

-- name: count_old_pruned_ids
-- Tombstones older than :until (prune's dry run).
SELECT count(*)::bigint AS n FROM pruned_ids
 WHERE pruned_at < %(until)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: count_old_rejections
-- Refused events older than :until (prune's dry run).
SELECT count(*)::bigint AS n FROM rejections WHERE at < %(until)s;

-- name: count_old_rejections_tenant
-- The same for one tenant.
SELECT count(*)::bigint AS n FROM rejections WHERE tenant = %(tenant)s AND at < %(until)s;

-- name: subscription_put
-- Declare a subscription, or change one (its cursor kept); a new one starts at :cursor, or
-- (NULL) at the end of the log.
INSERT INTO subscriptions (name, filter, url, consumer, headers, secret, cursor, paused,
                           created_at, updated_at)
VALUES (%(name)s, %(filter)s::jsonb, %(url)s, %(consumer)s, %(headers)s::jsonb, %(secret)s,
        coalesce(%(cursor)s::bigint, (SELECT coalesce(max(seq), 0) FROM transitions)),
        %(paused)s, %(at)s, %(at)s)
ON CONFLICT (name) DO UPDATE
   SET filter = excluded.filter, url = excluded.url, consumer = excluded.consumer,
       headers = excluded.headers, secret = excluded.secret, paused = excluded.paused,
       updated_at = excluded.updated_at;

-- name: subscription_get
SELECT * FROM subscriptions WHERE name = %(name)s;

-- name: subscription_list
SELECT * FROM subscriptions ORDER BY name;

-- name: subscription_delete
DELETE FROM subscriptions WHERE name = %(name)s;

-- name: subscription_pause
UPDATE subscriptions SET paused = %(paused)s, updated_at = %(at)s WHERE name = %(name)s;

-- name: subscription_advance
-- Move a subscription's cursor if and only if it is still at :old (two pumps: one moves it;
-- the second waits for the first's row lock, then finds the cursor moved).
UPDATE subscriptions SET cursor = %(new)s, updated_at = %(at)s
 WHERE name = %(name)s AND cursor = %(old)s;

-- name: subscription_enqueue
-- A subscription's notification of one transition (or message), due now.
INSERT INTO alert_outbox (receiver, fingerprint, status, idempotency_key, alert, created_at,
                          next_at, kind, subscription, order_key)
VALUES (%(receiver)s, %(workflow_id)s, %(status)s, %(key)s, %(body)s::jsonb, %(at)s, %(at)s,
        'transition', %(subscription)s, %(workflow_id)s)
ON CONFLICT (receiver, idempotency_key) DO NOTHING;

-- name: workflow_kinds
-- Type, tenant, version and terminal flag of some workflows (by primary key).
SELECT id, type, tenant, version, terminal FROM workflows WHERE id = ANY(%(ids)s::text[]);

-- name: outbox_pending
-- Notifications still due or claimed, per kind, and the oldest one's creation time.
SELECT kind, count(*) AS n, min(created_at) AS oldest FROM alert_outbox
 WHERE next_at IS NOT NULL GROUP BY kind;

-- name: log_head
-- The last seq of the log (the primary key's end): how far behind a subscription is.
SELECT coalesce(max(seq), 0) AS seq FROM transitions;
