-- The hosted sign-in page (/signin) remembers which platform session signed in through a browser, so
-- a later visit can offer "Continue as …". The cookie secret is stored only as its SHA-256; the row is
-- usable only while its session is (joined on every read) and goes with it.
CREATE TABLE signin_browser_sessions (
  id text PRIMARY KEY,
  cookie_hash text NOT NULL UNIQUE,
  session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL
);
CREATE INDEX signin_browser_sessions_session_idx ON signin_browser_sessions (session_id);
