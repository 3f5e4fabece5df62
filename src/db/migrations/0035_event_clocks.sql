-- The last created_at given to an event about each user (user.*, role.*, organization.member_*).
-- Receivers drop an event older than the last one they applied (Part B delivery semantics 4); a
-- request's instant is taken when it starts, so of two racing changes the one that started first
-- may commit second. Each such event is dated strictly after the user's last one, under this row's
-- lock (held to commit), so dates follow commits. Rows a day old are pruned: by then every later
-- request's instant is past them.
CREATE TABLE IF NOT EXISTS event_clocks (
  subject text PRIMARY KEY,
  last_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS event_clocks_prune_idx ON event_clocks (last_at);
