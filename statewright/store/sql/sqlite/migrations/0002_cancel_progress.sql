-- 0002_cancel_progress: cancel requests and progress reports on the workflow row.

ALTER TABLE workflows ADD COLUMN cancel_requested TEXT;
ALTER TABLE workflows ADD COLUMN progress TEXT;
