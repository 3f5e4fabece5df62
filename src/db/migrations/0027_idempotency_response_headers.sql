-- The response headers a client relies on (ETag, Location) are replayed with the stored status and body.
ALTER TABLE idempotency_keys ADD COLUMN response_headers jsonb;
