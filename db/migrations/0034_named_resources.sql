-- Named resources and shared GPUs (issue 30): what a queued step asks for
-- beyond CPUs, memory and GPUs, and what a running attempt holds of it.
--   named       {NAME: count} of the host's named resources (FERRY_RESOURCES
--               license=2; the step's resources: {license: 1}), NULL for none
--   gpu_shared  its GPUs may be shared with other shared requests
--               (resources: {gpus: {count: 1, shared: true}}); a GPU held
--               by an attempt that does not share is never given again
-- ferry_claim_candidates returns both: its result's shape changes.
ALTER TABLE step_queue ADD COLUMN named jsonb, ADD COLUMN gpu_shared boolean NOT NULL DEFAULT false;
ALTER TABLE attempts ADD COLUMN named jsonb, ADD COLUMN gpu_shared boolean NOT NULL DEFAULT false;
DROP FUNCTION IF EXISTS ferry_claim_candidates(int, bigint, bigint, interval, real);
