-- Named API tokens (`ferryd token create|list|revoke`): only the sha256 of a
-- token is stored, never the token. A revoked token keeps its row (and its
-- name, so actors recorded under it stay unambiguous); the API reloads the
-- live ones every second, so a revoke takes effect within about that.
-- The token in FERRY_API_TOKEN / $FERRY_HOME/api-token is not here: it is
-- the built-in `admin`, so no row may take that name.

CREATE TABLE api_tokens (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$' AND name <> 'admin'),
    role       text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    hash       text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
