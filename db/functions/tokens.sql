-- Named API tokens (migration 0008's api_tokens): every change of the table
-- tells each daemon's token reloader at once (api/tokens.c LISTENs on
-- ferry_tokens), one notification a statement, sent at commit. The trigger
-- is migration 0024's.
CREATE OR REPLACE FUNCTION ferry_tokens_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('ferry_tokens', '');
	RETURN NULL;
END;
$$;
