-- 0021_compensation: steps that declare their undo (issue 26, the saga pattern).
--   steps.compensation  the name of the step's compensation (run.step(..., compensate=fn)),
--                       recorded when the step is opened or begun, so a step found executing
--                       after a crash and reconciled as applied is still known to need undoing;
--                       NULL: none (every step before this migration, and a fork's copies).

ALTER TABLE steps ADD COLUMN compensation TEXT;
