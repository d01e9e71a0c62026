-- Preemption (issue 30, item 5): a running attempt chosen to make room for
-- a higher-priority step records which one (engine/preempt.c, ferry_preempt):
--   preempted_by  "run 41/train", set when its job is stopped for that step;
--                 its resources then count as free for the next choice (so
--                 one waiting step never stops more than it needs)
--   keeps_room    on the waiting step it is done for: it counts as starving
--                 (first in the claim's order, and nothing after it starts
--                 while it does not fit), so the room its victims free as
--                 they end is not taken by a smaller step behind it
--                 (backfill), the victims' own retries among them
ALTER TABLE attempts ADD COLUMN preempted_by text;
ALTER TABLE step_queue ADD COLUMN keeps_room boolean NOT NULL DEFAULT false;
