-- The data-encryption key used when ENCRYPTION_KEY is not set (docs/decisions.md "Secrets at rest"):
-- one row ('default'), made by the first process that needs it, shared by every process on the database.
CREATE TABLE encryption_keys (
  slot text PRIMARY KEY CHECK (slot = 'default'),
  kid text NOT NULL UNIQUE,
  key text NOT NULL,
  created_at timestamptz NOT NULL
);
