-- 0020_subscriptions: an outbox committed with the transition, and subscriptions (issue 26).
--   transitions.messages  what the transition's handler emitted (run.emit), a JSON list of
--                         {"topic", "body"}; NULL when none (written with the log entry, so
--                         it commits with the transition, and costs nothing when unused)
--   subscriptions         who is told about which transitions: a filter, a target (a webhook
--                         URL, or a named Python consumer) and the durable cursor (a log seq)
--                         up to which the log was enqueued (webhooks) or acknowledged
--                         (consumers)
--   alert_outbox          now the outbox of every notification: kind 'alert' (as before) or
--                         'transition' (a subscription's); a transition's row names its
--                         subscription and its ordering key (the workflow): the claim never
--                         hands out a row while an earlier row of the same (subscription,
--                         workflow) is still due or claimed (order per workflow)
ALTER TABLE transitions ADD COLUMN messages TEXT;
CREATE TABLE subscriptions (
    name        TEXT    PRIMARY KEY,
    filter      TEXT    NOT NULL,
    url         TEXT,
    consumer    INTEGER NOT NULL DEFAULT 0,
    headers     TEXT,
    secret      TEXT,
    cursor      INTEGER NOT NULL DEFAULT 0,
    paused      INTEGER NOT NULL DEFAULT 0,
    created_at  REAL    NOT NULL,
    updated_at  REAL    NOT NULL
);
ALTER TABLE alert_outbox ADD COLUMN kind TEXT NOT NULL DEFAULT 'alert';
ALTER TABLE alert_outbox ADD COLUMN subscription TEXT;
ALTER TABLE alert_outbox ADD COLUMN order_key TEXT;
CREATE INDEX alert_outbox_order ON alert_outbox (subscription, order_key, id)
    WHERE next_at IS NOT NULL AND order_key IS NOT NULL;
