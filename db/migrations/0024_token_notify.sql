-- A created, revoked or deleted named token takes effect on every daemon at
-- once: each daemon's token reloader (api/tokens.c) LISTENs on ferry_tokens
-- and reads the live tokens again when told, instead of every second. One
-- notification a statement, sent at commit (a token written in a
-- transaction that rolls back tells nobody).
CREATE FUNCTION ferry_tokens_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('ferry_tokens', '');
	RETURN NULL;
END;
$$;

CREATE TRIGGER api_tokens_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_tokens
	FOR EACH STATEMENT
	EXECUTE FUNCTION ferry_tokens_changed();
