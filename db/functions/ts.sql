-- Timestamps as the API writes them.
--
-- ferry_ts: ISO-8601 UTC with milliseconds, the one timestamp format of the API.
CREATE OR REPLACE FUNCTION ferry_ts(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
