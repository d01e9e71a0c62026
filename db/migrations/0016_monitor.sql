-- The job monitor (issue 13, orchestrator/monitor.md): what it sees of each
-- attempt it watches, written by the daemon that runs the job every few
-- samples and when anything changes, read by the API
-- (GET /runs/{id}/steps/{step}/monitor) and `ferry monitor`. One row per
-- attempt; every field is bounded by the writer (the last samples, a
-- downsampled metric series), so a long run's row does not grow. What
-- happened (suspected, hung, cleared, low utilization, a watchpoint that
-- fired) goes to events as monitor.* kinds: the row is the present, the
-- events the history.
CREATE TABLE attempt_monitor (
	step_id    bigint NOT NULL REFERENCES steps (id) ON DELETE CASCADE,
	attempt    int NOT NULL,
	run_id     bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	state      text NOT NULL,     -- hang.h: warmup, alive, phase, quiet, suspected, hung; done at the end
	why        text,
	phase      text,
	config     jsonb,             -- the effective hang settings
	samples    jsonb NOT NULL DEFAULT '[]',
	gpus       jsonb,             -- the job's GPUs in the last sample
	series     jsonb,             -- watchpoints.h: metric series
	watch      jsonb,             -- … and the rules' results
	evidence   jsonb,             -- collected when it was declared hung
	started_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (step_id, attempt)
);
CREATE INDEX attempt_monitor_run ON attempt_monitor (run_id);
