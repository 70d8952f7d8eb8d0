-- 0006_timer_keys: dynamic and recurring timers.
--   timers.key     a scheduled timer's name: scheduling the same key again replaces it
--   timers.every   a recurring timer's interval in seconds (NULL: it fires once)
--   timers.keep    the timer survives leaving its state (cleared at a terminal state only)
-- Existing timers are a state's own one-shot timers: no key, no interval, not kept.

ALTER TABLE timers ADD COLUMN key TEXT;
ALTER TABLE timers ADD COLUMN every DOUBLE PRECISION;
ALTER TABLE timers ADD COLUMN keep BOOLEAN NOT NULL DEFAULT FALSE;
CREATE UNIQUE INDEX timers_key ON timers (workflow_id, key) WHERE key IS NOT NULL;
