-- A rotated key is published before it signs: every process reloads its keys at least once a minute,
-- so a key that signs from two minutes after its creation is in every process's JWKS before any
-- process signs with it, and all processes switch at the same instant (the old key's retired_at).
ALTER TABLE signing_keys ADD COLUMN signs_from timestamptz;
UPDATE signing_keys SET signs_from = created_at;
ALTER TABLE signing_keys ALTER COLUMN signs_from SET NOT NULL;
