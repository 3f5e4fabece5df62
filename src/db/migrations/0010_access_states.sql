-- The last access state announced per (user, Application): time-driven jobs and mutations compare
-- against what subscribers were told, so a flip is announced exactly once.
CREATE TABLE access_states (
  user_id text NOT NULL,
  application_id text NOT NULL,
  allowed boolean NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (user_id, application_id)
);
