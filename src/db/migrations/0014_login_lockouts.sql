-- The login lockout of an email that has no password identity (unknown, invited, SSO-only): the same
-- five failures in 15 minutes and 15-minute lock as a real identity, so that 429 after five tries does
-- not tell which accounts exist (catalog AU-4). Keyed by mode and the SHA-256 of the lower-cased
-- email (no address is stored); rows are pruned after expires_at.
CREATE TABLE login_lockouts (
  key text PRIMARY KEY,
  recent_failures timestamptz[] NOT NULL DEFAULT '{}',
  locked_until timestamptz,
  expires_at timestamptz NOT NULL
);
CREATE INDEX login_lockouts_expiry_idx ON login_lockouts (expires_at);
