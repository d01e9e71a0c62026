-- ferry_claim takes a sixth argument, p_step (claim that step only: `ferry
-- dev run --step`); db/functions/claim.sql creates the new form.
DROP FUNCTION IF EXISTS ferry_claim(text, text, int, bigint, bigint);
