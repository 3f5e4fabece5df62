-- Lockout counts failures in a rolling 15-minute window: the recent failure times per identity.
ALTER TABLE identities ADD COLUMN recent_failures timestamptz[] NOT NULL DEFAULT '{}';
