-- ferry_finish_claim (db/functions/finish.sql) returns how long its claim
-- took (claim_us), for the claim's histogram and the admission benchmark:
-- a result type CREATE OR REPLACE cannot change.
DROP FUNCTION IF EXISTS ferry_finish_claim(text, bigint[], int[], text[], int[], int[], text[], boolean[], jsonb[],
                                           jsonb[], jsonb[], text[], jsonb[], text, int, bigint, bigint, bigint,
                                           jsonb, boolean);
