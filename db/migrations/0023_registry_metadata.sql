-- The registry a team expects (issue 25 item 6): a description and tags on
-- models and versions, versions archived (kept, never deployed or aliased
-- again until restored), aliases removed; each change a model event.
ALTER TABLE models ADD COLUMN description text;
ALTER TABLE models ADD COLUMN tags jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(tags) = 'object');
ALTER TABLE model_versions ADD COLUMN description text;
ALTER TABLE model_versions ADD COLUMN tags jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(tags) = 'object');
ALTER TABLE model_versions ADD COLUMN archived_at timestamptz;
ALTER TABLE model_versions ADD COLUMN archived_by text;
