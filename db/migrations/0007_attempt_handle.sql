-- Attempts record the executor type that runs their job and its opaque
-- handle (orchestrator/exec.h): {"pid","start"} for local jobs, later a
-- container id or a Slurm job id. The pid columns move into the handle.
ALTER TABLE attempts ADD COLUMN executor text, ADD COLUMN handle jsonb;
UPDATE attempts SET executor = 'local', handle = jsonb_build_object('pid', pid, 'start', pid_start)
WHERE pid IS NOT NULL;
ALTER TABLE attempts DROP COLUMN pid, DROP COLUMN pid_start;
