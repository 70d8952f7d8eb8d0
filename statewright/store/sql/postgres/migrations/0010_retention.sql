-- 0010_retention: the one sanctioned delete of the log. Prune sets statewright.prune for its
-- own transaction only (set_config(..., true)) and deletes finished workflows whole; any
-- other delete, and prune's own of the log of a live workflow, is refused. Updates and
-- TRUNCATE stay refused always.
CREATE OR REPLACE FUNCTION statewright_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('statewright.prune', true) = 'on'
       AND NOT EXISTS (SELECT 1 FROM workflows WHERE id = OLD.workflow_id AND NOT terminal) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the transition log is append-only' USING ERRCODE = 'restrict_violation';
END
$$;
-- a workflow's refusals (deleted and archived with it)
CREATE INDEX rejections_workflow ON rejections (workflow_id);
-- a workflow's inputs, consumed or not (archived and deleted with it)
CREATE INDEX inbox_workflow ON inbox (workflow_id, id);
