-- What the leader last said of each serving version's health
-- (deploy/reconcile_plan.c): 'served' once it has a healthy replica,
-- 'unserved' once it lost its last one while it had a share of the
-- traffic, NULL before it first served and while it does not serve (its
-- deployment stopped, it retired). The version-no-healthy-replica and
-- version-healthy-again events are written with it, in one statement, and
-- judged against it, not against the replicas' recorded health: a daemon
-- killed between a replica's change and its version's event left that
-- event unsaid for ever (the next round found the replica's row already
-- unhealthy: no change); the next round says it now.
ALTER TABLE deployment_versions ADD COLUMN health_said text CHECK (health_said IN ('served', 'unserved'));
-- what the rows say now: a serving version with a healthy replica has been served
UPDATE deployment_versions v SET health_said = 'served'
WHERE v.state = 'serving' AND EXISTS (SELECT 1 FROM deployment_replicas r WHERE r.deployment_id = v.deployment_id
                                      AND r.version = v.version AND r.health = 'healthy');
