/*
 * exec_spare — the local executor's spare supervisor: one bin/ferry-shim
 * started ahead of its job and handed the job when it starts (the design
 * note is exec_spare.c's). Private to exec/ (exec_local.c).
 */
#ifndef FERRY_EXEC_SPARE_H
#define FERRY_EXEC_SPARE_H

#include <stdint.h>
#include <sys/types.h>

/* Keeps a spare of the shim at shim_path ready from now on (a thread starts them); once. */
void exec_spare_enable(const char *shim_path);

/*
 * The ready spare, handed the job the shim's argv and envp describe: its
 * pid, with *start its start time; 0 when none is ready or the hand-over
 * failed (then start the job cold). A spare is handed one job, once.
 */
pid_t exec_spare_take(char *const argv[], char *const envp[], int64_t *start);

/* Stops the keeper; the ready spare, if any, exits (it reads end-of-file). */
void exec_spare_stop(void);

#endif
