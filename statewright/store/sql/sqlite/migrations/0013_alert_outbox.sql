-- 0013_alert_outbox: alert delivery (statewright.observability.delivery).
--   alert_states  the alerts firing now, one row per fingerprint (rule + labels): a restart
--                 neither fires them again nor forgets to resolve them
--   alert_outbox  one notification (firing or resolved) per receiver, written in the
--                 transaction that changes alert_states; next_at is when it is due (while
--                 claimed: when the claim ends), NULL once delivered or dead
CREATE TABLE alert_states (
    fingerprint TEXT PRIMARY KEY,
    rule        TEXT NOT NULL,
    labels      TEXT NOT NULL,
    annotations TEXT NOT NULL,
    starts_at   REAL NOT NULL
);
CREATE TABLE alert_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver        TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    alert           TEXT    NOT NULL,
    created_at      REAL    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_at         REAL,
    claim           TEXT,
    delivered_at    REAL,
    dead_at         REAL,
    last_error      TEXT,
    UNIQUE (receiver, idempotency_key)
);
CREATE INDEX alert_outbox_due ON alert_outbox (next_at) WHERE next_at IS NOT NULL;
