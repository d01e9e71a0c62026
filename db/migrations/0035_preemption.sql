-- Preemption (issue 30, item 5): a running attempt chosen to make room for
-- a higher-priority step records which one (engine/preempt.c, ferry_preempt):
--   preempted_by  "run 41/train", set when its job is stopped for that step;
--                 its resources then count as free for the next choice (so
--                 one waiting step never stops more than it needs)
ALTER TABLE attempts ADD COLUMN preempted_by text;
