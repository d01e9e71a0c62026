/*
 * dev — `ferry dev run FILE [--only STEP|--from STEP|--to STEP] [-p k=v]…`:
 * runs the engine in-process on the embedded database.
 */
#ifndef FERRY_DEV_H
#define FERRY_DEV_H

/* argv[0] is "run"; returns the process exit status (0, 1 or 2). */
int dev_main(int argc, char **argv);

#endif
