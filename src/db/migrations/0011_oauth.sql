-- Hosted sign-in (OAuth 2.0 authorization code + PKCE, public clients). Codes and app refresh tokens
-- are stored only as SHA-256 hashes. App refresh tokens live apart from the platform refresh_tokens so
-- that one can never be exchanged at the other's endpoint; both end with their session.
CREATE TABLE oauth_authorization_codes (
  id text PRIMARY KEY,
  code_hash text NOT NULL UNIQUE,
  application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  test_mode boolean NOT NULL,
  redirect_uri text NOT NULL,
  code_challenge text NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz
);
CREATE INDEX oauth_authorization_codes_session_idx ON oauth_authorization_codes (session_id);

-- One row per app refresh token; every token of one grant (the code exchange and its rotations)
-- carries the code's id, so a replayed code or refresh token revokes the whole family.
CREATE TABLE oauth_refresh_tokens (
  id text PRIMARY KEY,
  token_hash text NOT NULL UNIQUE,
  application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
  session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  authorization_code_id text NOT NULL REFERENCES oauth_authorization_codes (id) ON DELETE CASCADE,
  parent_id text,
  test_mode boolean NOT NULL,
  created_at timestamptz NOT NULL,
  idle_expires_at timestamptz NOT NULL,
  used_at timestamptz,
  revoked_at timestamptz
);
CREATE INDEX oauth_refresh_tokens_code_idx ON oauth_refresh_tokens (authorization_code_id);
CREATE INDEX oauth_refresh_tokens_session_idx ON oauth_refresh_tokens (session_id);

ALTER TABLE oauth_authorization_codes ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON oauth_authorization_codes
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));
ALTER TABLE oauth_refresh_tokens ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON oauth_refresh_tokens
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));
