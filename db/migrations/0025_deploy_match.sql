-- Header-based routing for A/B tests (a canary's match: {header, value}):
-- while match_version is set, requests to the deployment that carry
-- match_header (equal to match_value, or with any value when that is
-- NULL) go to match_version alone, every other request by the weights.
-- The deploy step sets it for the test and clears it when the version is
-- promoted or rolled back; reconcile.c applies it to HAProxy (a second
-- backend, NAME:ab, and a use_backend rule in the frontend).
ALTER TABLE deployments
	ADD COLUMN match_version text,
	ADD COLUMN match_header text,
	ADD COLUMN match_value text,
	ADD CONSTRAINT deployments_match_whole CHECK ((match_version IS NULL) = (match_header IS NULL));
