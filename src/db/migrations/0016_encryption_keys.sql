-- The data-encryption key used when ENCRYPTION_KEY is not set (docs/decisions.md "Secrets at rest"):
-- one row, made by the first process that needs it, shared by every process on the database.
CREATE TABLE encryption_keys (
  kid text PRIMARY KEY,
  key text NOT NULL,
  created_at timestamptz NOT NULL
);
