-- The claim token ties an idempotency record to the request that holds it: the mutation's own
-- transaction completes the record only while it still holds the claim.
ALTER TABLE idempotency_keys ADD COLUMN claim_token text;
