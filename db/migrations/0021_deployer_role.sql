-- The deployer role (issue 25): between operator and admin, for what
-- serves — model aliases, deployments, their traffic, predictions — and a
-- run's register alias and deploy step, checked against its submitter.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_role_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_role_check CHECK (role IN ('viewer', 'operator', 'deployer', 'admin'));
