-- The private signing key is stored sealed (enc:v1:…, docs/decisions.md "Secrets at rest"): text,
-- like every other sealed column, so one start-up reseal serves them all. A key stored before
-- sealing existed becomes its JWK's JSON text (read as it is and sealed at start); one sealed while
-- the column was jsonb was a JSON string and becomes that string.
ALTER TABLE signing_keys ALTER COLUMN private_jwk TYPE text
  USING CASE WHEN jsonb_typeof(private_jwk) = 'string' THEN private_jwk #>> '{}' ELSE private_jwk::text END;
