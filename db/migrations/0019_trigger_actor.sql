-- Who registered a trigger last (the workflow's registrar): the runs it
-- starts act with that person's role when a step moves an alias or
-- traffic (steps_submitter_is_admin).
ALTER TABLE triggers ADD COLUMN updated_by text;
