-- Where a registered workflow's files are (`ferry workflow register FILE`
-- sends the file's directory): runs of it by name run there unless the
-- request names a workdir of its own. NULL: registered without one (a bare
-- POST /workflows, or a version first stored by a run sent as YAML).
ALTER TABLE workflows ADD COLUMN workdir text;
