-- ferry_finish and ferry_finish_claim (db/functions/finish.sql) take the
-- start records (executor, handle, directory) of attempts that end before
-- their record was written on its own (engine.c, "late records"): three
-- arguments more, with defaults, which CREATE OR REPLACE makes a second
-- function beside the old ones: the old ones go.
DROP FUNCTION IF EXISTS ferry_finish(text, bigint[], int[], text[], int[], int[], text[], boolean[], jsonb[], jsonb[],
                                     jsonb[], text[], jsonb[]);
DROP FUNCTION IF EXISTS ferry_finish_claim(text, bigint[], int[], text[], int[], int[], text[], boolean[], jsonb[],
                                           jsonb[], jsonb[], text[], jsonb[], text, int, bigint, bigint, bigint,
                                           jsonb, boolean);
