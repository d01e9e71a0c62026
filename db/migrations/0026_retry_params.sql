-- ferry_retry takes the run's new params and the steps' specs planned with
-- them (a retry with changed params: db/functions/retry.sql); the old
-- four-argument definition goes, so that a call names one function.
DROP FUNCTION IF EXISTS ferry_retry(bigint, text, text, boolean);
