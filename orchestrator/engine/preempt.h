/*
 * preempt — the `preempt` periodic task (issue 30, item 5): every 2 s,
 * on each daemon that admits by its host's room, the step at the head of
 * the claim's order that has waited FERRY_PREEMPT_AFTER_S (30 s) and does
 * not fit may take the room of this daemon's running attempts whose steps
 * say preemptible: true and rank lower (db/functions/preempt.sql chooses
 * them, marks them and records step.preempted naming who took the room);
 * their jobs are stopped here with the restart outcome: each step is
 * ready again at once, its try not counted, and starts again later from
 * its FERRY_CHECKPOINT_DIR. FERRY_PREEMPT_AFTER_S=0 turns it off.
 */
#ifndef FERRY_PREEMPT_H
#define FERRY_PREEMPT_H

#include "store/task.h"

extern const struct task preempt_task;

#endif
