-- The user a stored Idempotency-Key answer is about (the {id} of a /v1/users/{id}/… operation, `me`
-- resolved), so the erasure cascade can drop those answers without opening every sealed one.
-- Answers stored before this migration have none; they expire within 24 hours.
ALTER TABLE idempotency_keys ADD COLUMN subject_user_id text;
CREATE INDEX idempotency_keys_subject_idx ON idempotency_keys (subject_user_id) WHERE subject_user_id IS NOT NULL;
