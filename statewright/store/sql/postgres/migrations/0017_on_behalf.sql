-- 0015_on_behalf: who a timer or a schedule acts for (issue 22).
--   timers.scheduled_by   who scheduled the timer (Engine.schedule's actor): its transition
--                         is logged as "timer for <scheduled_by>"; NULL: the system's own
--   schedules.created_by  who declared the schedule's definition: its ticks start workflows
--                         as "schedule:<id> for <created_by>"; NULL: declared before this
--                         migration, or by the Python API without an actor

ALTER TABLE timers ADD COLUMN scheduled_by TEXT;
ALTER TABLE schedules ADD COLUMN created_by TEXT;
