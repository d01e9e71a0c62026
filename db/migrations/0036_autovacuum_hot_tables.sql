-- Autovacuum of the engine's hot tables, less often while they are small.
--
-- A vacuum or an analyze of a table invalidates every cached plan that
-- reads it, so the engine's next ferry_finish and ferry_claim plan their
-- statements again: 2-4 ms more for that one claim, on 2 cores the tail of
-- admission (bench_queues: 1,000 jobs through 2 slots met 40-50 autovacuum
-- rounds, most of them of these tables, at PostgreSQL's thresholds of 50
-- rows; the claims right after them were the slowest 2%). These tables
-- churn by a few rows a step: attempts (written three times an attempt),
-- runs (one row a run, updated as its steps end), events (append-only, read
-- by run_id through its index), attempt_monitor (one row an attempt,
-- rewritten each round of the monitor). Their plans do not hang on fresh
-- statistics (the engine's functions use generic plans and their indexes;
-- a backlog refreshes steps' and step_queue's own, engine.c
-- refresh_statistics), and a few thousand dead rows cost them nothing, so
-- they are vacuumed and analyzed after thousands of changes, not fifty;
-- large tables are still vacuumed at their scale factors. steps,
-- step_queue and step_deps keep 0001's settings: a draining fan-out's claims
-- read past step_queue's deleted rows until it is vacuumed.
ALTER TABLE attempts SET (autovacuum_vacuum_threshold = 2000, autovacuum_analyze_threshold = 2000);
ALTER TABLE runs SET (autovacuum_vacuum_threshold = 2000, autovacuum_analyze_threshold = 2000);
ALTER TABLE events SET (autovacuum_analyze_threshold = 5000, autovacuum_vacuum_insert_threshold = 5000);
ALTER TABLE attempt_monitor SET (autovacuum_vacuum_threshold = 2000, autovacuum_analyze_threshold = 2000,
                                 autovacuum_vacuum_insert_threshold = 2000);
