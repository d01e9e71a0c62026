-- Branching and always-run steps (issue 28): a step's when: and needs
-- with if: any, and the steps under finally:.
--
-- step_deps.if_any: the step runs when the one it needs succeeded or was
-- skipped (needs: [{step: X, if: any}]), not only when it succeeded.
-- runs.final_steps: how many of the run's steps are under finally: (they
-- wait, one dependency more each, for every other step to be terminal);
-- runs.body_state: how the other steps ended (succeeded, failed or
-- stopped), set when the finally steps were released — the run's state
-- once they are done, and their FERRY_RUN_STATE.
ALTER TABLE step_deps ADD COLUMN if_any boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN final_steps int NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN body_state text CHECK (body_state IN ('succeeded', 'failed', 'stopped'));
