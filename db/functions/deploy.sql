-- Deployments: what their rows keep by themselves. zero_since is when a
-- serving version last went to 0% (whatever wrote the weight: a deploy or
-- canary step, traffic, promote, rollback); the leader's reconcile round
-- retires it once it has been there longer than its deployment's
-- retire_after_s (store_deploy_retire_due). The trigger is migration 0022's.
CREATE OR REPLACE FUNCTION ferry_deployment_version_zero_since() RETURNS trigger
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
