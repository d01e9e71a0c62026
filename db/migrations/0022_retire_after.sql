-- Versions retire (issue 25): a serving version at 0% for longer than its
-- deployment's retire_after_s (default an hour; NULL: never) is retired by
-- the leader's reconcile round — drained already, its replicas stopped,
-- an event — and comes back with traffic. zero_since is when it last went
-- to 0% while serving, kept by the trigger below whatever sets the weight.
ALTER TABLE deployments ADD COLUMN retire_after_s int DEFAULT 3600 CHECK (retire_after_s IS NULL OR retire_after_s > 0);
ALTER TABLE deployment_versions ADD COLUMN zero_since timestamptz;

CREATE FUNCTION ferry_deployment_version_zero_since() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state = 'serving' AND NEW.weight = 0 THEN
		IF TG_OP = 'INSERT' OR OLD.state <> 'serving' OR OLD.weight <> 0 OR OLD.zero_since IS NULL THEN
			NEW.zero_since := now();
		END IF;
	ELSE
		NEW.zero_since := NULL;
	END IF;
	RETURN NEW;
END;
$$;
CREATE TRIGGER deployment_version_zero_since BEFORE INSERT OR UPDATE OF weight, state ON deployment_versions
	FOR EACH ROW EXECUTE FUNCTION ferry_deployment_version_zero_since();
UPDATE deployment_versions SET zero_since = now() WHERE state = 'serving' AND weight = 0;
