-- The model registry (steps/registry.c, GET /models): versions, aliases
-- and their audit trail. Tables in db/migrations/0003_registry.sql.
--
-- ferry_model_version_json: the JSON of one version (as the API shows it).
CREATE OR REPLACE FUNCTION ferry_model_version_json(p_id bigint) RETURNS json
LANGUAGE sql STABLE AS $$
	SELECT json_build_object(
		'model', m.name, 'version', v.version,
		'aliases', (SELECT coalesce(json_agg(a.alias ORDER BY a.alias), '[]')
		            FROM model_aliases a WHERE a.version_id = v.id),
		'artifact', json_build_object('sha256', v.artifact, 'kind', x.kind, 'bytes', x.bytes,
		                              'path', x.path, 'name', v.artifact_name, 'source', v.source),
		'metrics', v.metrics, 'params', v.params,
		'lineage', json_build_object('run', v.run_id, 'step', v.step, 'workflow', v.workflow,
		                             'workflow_hash', v.workflow_hash,
		                             'data_fingerprint', v.data_fingerprint),
		'dev', v.dev, 'actor', v.actor, 'created_at', ferry_ts(v.created_at),
		'description', v.description, 'tags', v.tags,
		'archived', v.archived_at IS NOT NULL, 'archived_at', ferry_ts(v.archived_at), 'archived_by', v.archived_by)
	FROM model_versions v JOIN models m ON m.id = v.model_id JOIN artifacts x ON x.sha256 = v.artifact
	WHERE v.id = p_id
$$;

-- Points alias of model p_model at version p_version (a version string).
-- One event per change; setting an alias to where it already points
-- changes nothing and writes nothing. Returns the version's JSON.
CREATE OR REPLACE FUNCTION ferry_model_alias_set(p_model text, p_alias text, p_version text, p_actor text)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
	v_model bigint;
	v_vid bigint;
	v_old text;
	v_old_id bigint;
	v_dev boolean;
BEGIN
	SELECT id INTO v_model FROM models WHERE name = p_model FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model "%" not found', p_model USING ERRCODE = 'P0002';
	END IF;
	SELECT id, dev INTO v_vid, v_dev FROM model_versions WHERE model_id = v_model AND version = p_version;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model "%" has no version "%"', p_model, p_version USING ERRCODE = 'P0002';
	END IF;
	IF EXISTS (SELECT 1 FROM model_versions WHERE id = v_vid AND archived_at IS NOT NULL) THEN
		RAISE EXCEPTION 'version % of model "%" is archived: restore it first (ferry models restore % %)',
			p_version, p_model, p_model, p_version USING ERRCODE = '55000';
	END IF;
	IF v_dev THEN
		RAISE EXCEPTION 'version % of model "%" was registered by a dev run (ferry dev run): a dev version never takes an alias; register it from a real run',
			p_version, p_model USING ERRCODE = '55000';
	END IF;
	IF p_alias !~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$' THEN
		RAISE EXCEPTION 'alias "%" is not a name: a letter, then up to 62 letters, digits, _ . or -', p_alias
		USING ERRCODE = '22023';
	END IF;
	SELECT a.version_id, v.version INTO v_old_id, v_old
	FROM model_aliases a JOIN model_versions v ON v.id = a.version_id
	WHERE a.model_id = v_model AND a.alias = p_alias;
	IF v_old_id = v_vid THEN
		RETURN ferry_model_version_json(v_vid);
	END IF;
	INSERT INTO model_aliases (model_id, alias, version_id, actor) VALUES (v_model, p_alias, v_vid, p_actor)
	ON CONFLICT (model_id, alias) DO UPDATE SET version_id = excluded.version_id, actor = excluded.actor,
	       updated_at = now();
	UPDATE models SET updated_at = now() WHERE id = v_model;
	INSERT INTO model_events (model_id, version, alias, actor, kind, detail)
	VALUES (v_model, p_version, p_alias, p_actor, CASE WHEN v_old IS NULL THEN 'alias.set' ELSE 'alias.moved' END,
	        jsonb_strip_nulls(jsonb_build_object('from', v_old, 'to', p_version)));
	RETURN ferry_model_version_json(v_vid);
END;
$$;

-- The deployment whose traffic alias p_alias of model p_model follows, or
-- NULL: "production" names the version that serves a deployment of the
-- model (the largest share; ferry_deployment_alias_sync keeps it so), so
-- while one exists nothing else moves it (a register step, PUT alias).
CREATE OR REPLACE FUNCTION ferry_alias_bound(p_model text, p_alias text)
RETURNS text
LANGUAGE sql STABLE AS $$
	SELECT name FROM deployments WHERE model = p_model AND p_alias = 'production' ORDER BY id LIMIT 1
$$;

-- Moves "production" of the model deployment p_dep serves to the serving
-- version with the largest weight (a tie keeps the current one), for
-- p_actor, in the caller's transaction: every change of weights (a deploy
-- step, a canary step, traffic, promote, rollback, a retirement) ends with
-- it, so the registry and the traffic split never disagree. Nothing moves
-- when nothing has weight or it already points there. Returns the version.
CREATE OR REPLACE FUNCTION ferry_deployment_alias_sync(p_dep bigint, p_actor text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_model text;
	v_cur text;
	v_top text;
BEGIN
	SELECT model INTO v_model FROM deployments WHERE id = p_dep;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	SELECT v.version INTO v_cur
	FROM model_aliases a JOIN models m ON m.id = a.model_id JOIN model_versions v ON v.id = a.version_id
	WHERE m.name = v_model AND a.alias = 'production';
	SELECT dv.version INTO v_top FROM deployment_versions dv
	WHERE dv.deployment_id = p_dep AND dv.state = 'serving' AND dv.weight > 0
	ORDER BY dv.weight DESC, (dv.version = v_cur) DESC NULLS LAST, dv.ord DESC LIMIT 1;
	IF v_top IS NULL OR v_top IS NOT DISTINCT FROM v_cur THEN
		RETURN v_cur;
	END IF;
	PERFORM ferry_model_alias_set(v_model, 'production', v_top, p_actor);
	RETURN v_top;
END;
$$;

-- Registers a version of p_model (created on first use) in one transaction:
-- the artifact row (once per sha256), the version numbered from the latest
-- by p_bump (patch: 0.0.1 → 0.0.2, minor: → 0.1.0, major: → 1.0.0; the
-- first version is 0.0.1, 0.1.0 or 1.0.0), its aliases, the events (the
-- model's and the run's), on behalf of the run's actor (the daemon that did
-- it is in the event's detail). Registering again from the same run and step with
-- the same bytes returns the version already registered (p_created false).
CREATE OR REPLACE FUNCTION ferry_model_register(p_model text, p_bump text, p_sha text, p_kind text, p_bytes bigint,
                                     p_path text, p_name text, p_source text, p_metrics jsonb, p_params jsonb,
                                     p_run bigint, p_step text, p_data_fp text, p_aliases text[], p_actor text)
RETURNS TABLE (version text, created boolean, version_json json)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	v_model bigint;
	v_vid bigint;
	v_maj int;
	v_min int;
	v_pat int;
	v_version text;
	v_wf text;
	v_wf_hash text;
	v_actor text := p_actor;
	v_trigger text;
	v_alias text;
	v_dep text;
BEGIN
	IF p_bump NOT IN ('patch', 'minor', 'major') THEN
		RAISE EXCEPTION 'version bump "%" is not patch, minor or major', p_bump USING ERRCODE = '22023';
	END IF;
	INSERT INTO models (name) VALUES (p_model) ON CONFLICT (name) DO NOTHING;
	-- the model row is the lock that serialises version numbers
	SELECT id INTO v_model FROM models WHERE name = p_model FOR UPDATE;
	INSERT INTO artifacts (sha256, kind, bytes, path) VALUES (p_sha, p_kind, p_bytes, p_path)
	ON CONFLICT (sha256) DO NOTHING;

	IF p_run IS NOT NULL THEN
		SELECT v.id, v.version INTO v_vid, v_version FROM model_versions v
		WHERE v.model_id = v_model AND v.run_id = p_run AND v.step = p_step AND v.artifact = p_sha;
		IF FOUND THEN
			RETURN QUERY SELECT v_version, false, ferry_model_version_json(v_vid);
			RETURN;
		END IF;
		-- a version from a run is registered on behalf of whoever started the run
		SELECT workflow_name, workflow_hash, actor, trigger INTO v_wf, v_wf_hash, v_actor, v_trigger
		FROM runs WHERE id = p_run;
		v_actor := coalesce(v_actor, p_actor);
	END IF;

	-- an alias a deployment's traffic decides is not a register step's to move
	FOREACH v_alias IN ARRAY CASE WHEN v_trigger = 'dev' THEN '{}' ELSE coalesce(p_aliases, '{}') END LOOP
		v_dep := ferry_alias_bound(p_model, v_alias);
		IF v_dep IS NOT NULL THEN
			RAISE EXCEPTION 'alias "%" of model "%" follows the traffic of deployment "%" (it names the version that serves); register with another alias, such as candidate: the deploy step moves % when the new version takes the traffic',
				v_alias, p_model, v_dep, v_alias USING ERRCODE = '55000';
		END IF;
	END LOOP;

	SELECT v.major, v.minor, v.patch INTO v_maj, v_min, v_pat FROM model_versions v
	WHERE v.model_id = v_model ORDER BY v.major DESC, v.minor DESC, v.patch DESC LIMIT 1;
	IF NOT FOUND THEN
		v_maj := 0; v_min := 0; v_pat := 0;
	END IF;
	IF p_bump = 'major' THEN
		v_maj := v_maj + 1; v_min := 0; v_pat := 0;
	ELSIF p_bump = 'minor' THEN
		v_min := v_min + 1; v_pat := 0;
	ELSE
		v_pat := v_pat + 1;
	END IF;

	INSERT INTO model_versions (model_id, major, minor, patch, artifact, artifact_name, source, metrics,
	                            params, run_id, step, workflow, workflow_hash, data_fingerprint, actor, dev)
	VALUES (v_model, v_maj, v_min, v_pat, p_sha, p_name, p_source, p_metrics, p_params, p_run, p_step,
	        v_wf, v_wf_hash, p_data_fp, v_actor, coalesce(v_trigger = 'dev', false))
	RETURNING id, model_versions.version INTO v_vid, v_version;
	UPDATE models SET updated_at = now() WHERE id = v_model;
	INSERT INTO model_events (model_id, version, actor, kind, detail)
	VALUES (v_model, v_version, v_actor, 'version.registered',
	        jsonb_strip_nulls(jsonb_build_object('run', p_run, 'step', p_step, 'artifact', p_sha,
	                                             'daemon', p_actor)));
	IF p_run IS NOT NULL THEN
		INSERT INTO events (run_id, step, actor, kind, detail)
		VALUES (p_run, p_step, p_actor, 'model.registered',
		        jsonb_build_object('model', p_model, 'version', v_version, 'artifact', p_sha));
	END IF;
	-- a `ferry dev run` (debugging on one machine) registers its version but
	-- never moves an alias: production changes only through real runs or people
	FOREACH v_alias IN ARRAY CASE WHEN v_trigger = 'dev' THEN '{}' ELSE coalesce(p_aliases, '{}') END LOOP
		PERFORM ferry_model_alias_set(p_model, v_alias, v_version, v_actor);
		IF p_run IS NOT NULL THEN
			INSERT INTO events (run_id, step, actor, kind, detail)
			VALUES (p_run, p_step, p_actor, 'model.alias',
			        jsonb_build_object('model', p_model, 'alias', v_alias, 'version', v_version));
		END IF;
	END LOOP;
	RETURN QUERY SELECT v_version, true, ferry_model_version_json(v_vid);
END;
$$;

-- Removes alias p_alias of model p_model (an event); one that follows a
-- deployment's traffic (ferry_alias_bound) is refused. Returns the model's
-- aliases after, {"alias": "version"}.
CREATE OR REPLACE FUNCTION ferry_model_alias_delete(p_model text, p_alias text, p_actor text)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
	v_model bigint;
	v_version text;
	v_dep text;
BEGIN
	SELECT id INTO v_model FROM models WHERE name = p_model FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model "%" not found', p_model USING ERRCODE = 'P0002';
	END IF;
	v_dep := ferry_alias_bound(p_model, p_alias);
	IF v_dep IS NOT NULL THEN
		RAISE EXCEPTION 'alias "%" of model "%" follows the traffic of deployment "%": it goes with the deployment, not by hand',
			p_alias, p_model, v_dep USING ERRCODE = '55000';
	END IF;
	DELETE FROM model_aliases a USING model_versions v
	WHERE a.model_id = v_model AND a.alias = p_alias AND v.id = a.version_id
	RETURNING v.version INTO v_version;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model "%" has no alias "%"', p_model, p_alias USING ERRCODE = 'P0002';
	END IF;
	UPDATE models SET updated_at = now() WHERE id = v_model;
	INSERT INTO model_events (model_id, version, alias, actor, kind, detail)
	VALUES (v_model, v_version, p_alias, p_actor, 'alias.deleted', jsonb_build_object('from', v_version));
	RETURN (SELECT coalesce(json_object_agg(a.alias, v.version ORDER BY a.alias), '{}')
	        FROM model_aliases a JOIN model_versions v ON v.id = a.version_id WHERE a.model_id = v_model);
END;
$$;

-- Edits a model (p_version NULL) or one of its versions: p_description
-- (NULL: unchanged, '' clears it), p_tags merged (a null value removes that
-- tag), p_archived (NULL: unchanged; true archives: refused while the
-- version serves a deployment or an alias points at it; false restores).
-- One model event per edit, with what changed. Returns the model's or the
-- version's JSON.
CREATE OR REPLACE FUNCTION ferry_model_edit(p_model text, p_version text, p_description text, p_tags jsonb,
                                            p_archived boolean, p_actor text)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
	v_model bigint;
	v_vid bigint;
	v_was boolean;
	v_dep text;
	v_alias text;
	v_changed jsonb := '{}';
BEGIN
	SELECT id INTO v_model FROM models WHERE name = p_model FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model "%" not found', p_model USING ERRCODE = 'P0002';
	END IF;
	IF p_tags IS NOT NULL AND jsonb_typeof(p_tags) <> 'object' THEN
		RAISE EXCEPTION 'tags must be an object of name: value' USING ERRCODE = '22023';
	END IF;
	IF p_version IS NULL THEN
		UPDATE models SET description = CASE WHEN p_description IS NULL THEN description
		                                     ELSE nullif(p_description, '') END,
		       tags = CASE WHEN p_tags IS NULL THEN tags ELSE jsonb_strip_nulls(tags || p_tags) END,
		       updated_at = now()
		WHERE id = v_model;
	ELSE
		SELECT id, archived_at IS NOT NULL INTO v_vid, v_was FROM model_versions
		WHERE model_id = v_model AND version = p_version FOR UPDATE;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'model "%" has no version "%"', p_model, p_version USING ERRCODE = 'P0002';
		END IF;
		IF p_archived AND NOT v_was THEN
			SELECT d.name INTO v_dep FROM deployment_versions dv JOIN deployments d ON d.id = dv.deployment_id
			WHERE d.model = p_model AND dv.version = p_version AND dv.state <> 'retired' LIMIT 1;
			IF v_dep IS NOT NULL THEN
				RAISE EXCEPTION 'version % of model "%" serves in deployment "%": retire it there first (ferry deployments retire)',
					p_version, p_model, v_dep USING ERRCODE = '55000';
			END IF;
			SELECT a.alias INTO v_alias FROM model_aliases a WHERE a.version_id = v_vid ORDER BY a.alias LIMIT 1;
			IF v_alias IS NOT NULL THEN
				RAISE EXCEPTION 'version % of model "%" is alias "%": move or delete the alias first',
					p_version, p_model, v_alias USING ERRCODE = '55000';
			END IF;
		END IF;
		UPDATE model_versions SET
		       description = CASE WHEN p_description IS NULL THEN description ELSE nullif(p_description, '') END,
		       tags = CASE WHEN p_tags IS NULL THEN tags ELSE jsonb_strip_nulls(tags || p_tags) END,
		       archived_at = CASE WHEN p_archived IS NULL THEN archived_at WHEN p_archived THEN coalesce(archived_at, now())
		                          ELSE NULL END,
		       archived_by = CASE WHEN p_archived IS NULL THEN archived_by WHEN p_archived THEN coalesce(archived_by, p_actor)
		                          ELSE NULL END
		WHERE id = v_vid;
		UPDATE models SET updated_at = now() WHERE id = v_model;
	END IF;
	IF p_description IS NOT NULL THEN
		v_changed := v_changed || jsonb_build_object('description', nullif(p_description, ''));
	END IF;
	IF p_tags IS NOT NULL THEN
		v_changed := v_changed || jsonb_build_object('tags', p_tags);
	END IF;
	INSERT INTO model_events (model_id, version, actor, kind, detail)
	VALUES (v_model, p_version, p_actor,
	        CASE WHEN p_archived IS NOT NULL AND p_archived <> coalesce(v_was, false)
	             THEN CASE WHEN p_archived THEN 'version.archived' ELSE 'version.restored' END
	             WHEN p_version IS NULL THEN 'model.edited' ELSE 'version.edited' END,
	        v_changed);
	IF p_version IS NULL THEN
		RETURN json_build_object('name', p_model, 'description', (SELECT description FROM models WHERE id = v_model),
		                         'tags', (SELECT tags FROM models WHERE id = v_model));
	END IF;
	RETURN ferry_model_version_json(v_vid);
END;
$$;
